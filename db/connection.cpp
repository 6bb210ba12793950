#include "db/connection.hpp"

#include "db/queue_name.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <stdexcept>
#include <unordered_set>

#include <libpq-fe.h>
#include <poll.h>
#include <spdlog/spdlog.h>

namespace cmdbus::db {

namespace {

constexpr size_t max_kept_notices = 100;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  return s;
}

// Builds an error from a failed result, or from the connection state when no
// result is available.
error make_error(PGconn* conn, const PGresult* res) {
  std::string state;
  std::string msg;
  std::string detail;
  std::string constraint;
  if (res != nullptr) {
    if (const char* s = PQresultErrorField(res, PG_DIAG_SQLSTATE))
      state = s;
    if (const char* d = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL))
      detail = d;
    if (const char* c = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME))
      constraint = c;
    if (const char* m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY))
      msg = m;
    else
      msg = trim(PQresultErrorMessage(res));
  }
  if (msg.empty())
    msg = trim(PQerrorMessage(conn));
  if (msg.empty())
    msg = "unknown database error";
  auto code = classify_sqlstate(state);
  if (code == errc::other && PQstatus(conn) != CONNECTION_OK)
    code = errc::connection;
  return error{code, std::move(state), msg, std::move(detail),
               std::move(constraint)};
}

std::string quote_array_element(const std::string& x) {
  std::string out = "\"";
  for (char c : x) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

} // namespace

std::string array_literal(const std::vector<std::string>& xs) {
  std::string out = "{";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0)
      out += ',';
    out += quote_array_element(xs[i]);
  }
  out += '}';
  return out;
}

std::string array_literal(const std::vector<std::optional<std::string>>& xs) {
  std::string out = "{";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0)
      out += ',';
    out += xs[i] ? quote_array_element(*xs[i]) : std::string{"NULL"};
  }
  out += '}';
  return out;
}

std::string array_literal(const std::vector<int64_t>& xs) {
  std::string out = "{";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0)
      out += ',';
    out += std::to_string(xs[i]);
  }
  out += '}';
  return out;
}

void append_copy_field(std::string& row, std::string_view field) {
  // Runs without a character to escape are appended whole.
  size_t run = 0;
  for (size_t i = 0; i < field.size(); ++i) {
    const char* escaped = nullptr;
    switch (field[i]) {
    case '\\':
      escaped = "\\\\";
      break;
    case '\t':
      escaped = "\\t";
      break;
    case '\n':
      escaped = "\\n";
      break;
    case '\r':
      escaped = "\\r";
      break;
    default:
      continue;
    }
    row.append(field.data() + run, i - run).append(escaped);
    run = i + 1;
  }
  row.append(field.data() + run, field.size() - run);
}

// -- result ------------------------------------------------------------------

result::result(result&& other) noexcept : res_(other.res_) {
  other.res_ = nullptr;
}

result& result::operator=(result&& other) noexcept {
  if (this != &other) {
    PQclear(res_);
    res_ = other.res_;
    other.res_ = nullptr;
  }
  return *this;
}

result::~result() {
  PQclear(res_);
}

int result::rows() const noexcept {
  return res_ ? PQntuples(res_) : 0;
}

int result::columns() const noexcept {
  return res_ ? PQnfields(res_) : 0;
}

std::string result::column_name(int col) const {
  check(0, col);
  return PQfname(res_, col);
}

int result::column(std::string_view name) const {
  for (int i = 0; i < columns(); ++i)
    if (name == PQfname(res_, i))
      return i;
  throw std::out_of_range("result has no column named " + std::string{name});
}

void result::check(int row, int col) const {
  if (res_ == nullptr || col < 0 || col >= columns() || row < 0
      || (row >= rows() && !(row == 0 && rows() == 0)))
    throw std::out_of_range("result field (" + std::to_string(row) + ", "
                            + std::to_string(col) + ") out of range");
}

bool result::is_null(int row, int col) const {
  check(row, col);
  return PQgetisnull(res_, row, col) != 0;
}

std::string_view result::text(int row, int col) const& {
  check(row, col);
  return {PQgetvalue(res_, row, col),
          static_cast<size_t>(PQgetlength(res_, row, col))};
}

std::optional<std::string> result::opt_text(int row, int col) const {
  if (is_null(row, col))
    return std::nullopt;
  return std::string{text(row, col)};
}

int64_t result::int64(int row, int col) const {
  if (is_null(row, col))
    throw std::runtime_error("unexpected NULL in column "
                             + std::string{PQfname(res_, col)});
  std::string s{text(row, col)};
  size_t pos = 0;
  auto value = std::stoll(s, &pos);
  if (pos != s.size())
    throw std::runtime_error("column " + std::string{PQfname(res_, col)}
                             + " is not an integer");
  return value;
}

bool result::boolean(int row, int col) const {
  if (is_null(row, col))
    throw std::runtime_error("unexpected NULL in column "
                             + std::string{PQfname(res_, col)});
  return text(row, col) == "t";
}

int64_t result::affected_rows() const {
  const char* n = res_ ? PQcmdTuples(res_) : "";
  return *n == '\0' ? 0 : std::stoll(n);
}

// -- connection --------------------------------------------------------------

struct connection::impl {
  PGconn* conn = nullptr;
  std::string target;
  std::deque<std::string> notices;
  std::unordered_set<std::string> prepared;

  // Prepares `sql` as `name` unless done already on this connection.
  void prepare(const std::string& name, const std::string& sql, int nparams);

  ~impl() {
    if (conn != nullptr)
      PQfinish(conn);
  }

  static void on_notice(void* arg, const PGresult* res) {
    auto* self = static_cast<impl*>(arg);
    std::string msg;
    if (const char* m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY))
      msg = m;
    std::string severity;
    if (const char* s = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED))
      severity = s;
    spdlog::debug("postgres {}: {}", severity, msg);
    self->notices.push_back(std::move(msg));
    if (self->notices.size() > max_kept_notices)
      self->notices.pop_front();
  }
};

connection::connection(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

connection::connection(connection&&) noexcept = default;
connection& connection::operator=(connection&&) noexcept = default;
connection::~connection() = default;

connection connection::open(const std::string& dsn,
                            const connection_options& opts) {
  // Validate first so that a malformed DSN never reaches an error message.
  char* parse_err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(dsn.c_str(), &parse_err);
  if (parsed == nullptr) {
    PQfreemem(parse_err);
    throw invalid_argument("invalid connection string (expected libpq "
                           "key=value pairs or a postgresql:// URI)");
  }
  PQconninfoFree(parsed);
  auto ptr = std::make_unique<impl>();
  ptr->target = describe_target(dsn);
  auto timeout = std::to_string(opts.connect_timeout.count());
  // Our defaults come first so that the DSN can override them. Keepalives
  // notice a peer that vanished while we wait for a result (about a minute);
  // the TCP user timeout does the same for data the peer never
  // acknowledges, so that no call waits on a dead network for the kernel's
  // retransmission limit (many minutes).
  const char* keys[] = {"application_name", "connect_timeout", "keepalives",
                        "keepalives_idle",  "keepalives_interval",
                        "keepalives_count", "tcp_user_timeout",
                        "dbname",           nullptr};
  const char* values[] = {opts.application_name.c_str(),
                          timeout.c_str(),
                          "1",
                          "30",
                          "10",
                          "3",
                          "60000",
                          dsn.c_str(),
                          nullptr};
  ptr->conn = PQconnectdbParams(keys, values, 1);
  if (ptr->conn == nullptr)
    throw error{errc::connection, "", "out of memory allocating a connection"};
  if (PQstatus(ptr->conn) != CONNECTION_OK) {
    auto msg = trim(PQerrorMessage(ptr->conn));
    throw error{errc::connection, "",
                "cannot connect to " + ptr->target + ": " + msg};
  }
  PQsetNoticeReceiver(ptr->conn, &impl::on_notice, ptr.get());
  connection result{std::move(ptr)};
  // Timestamps are parsed from ISO output whatever the server's default.
  result.exec("SET datestyle TO 'ISO, MDY'");
  if (opts.statement_timeout)
    result.set_statement_timeout(*opts.statement_timeout);
  spdlog::debug("connected to {}", result.target());
  return result;
}

namespace {

// Wraps `res` after checking its status; throws `error` on failure.
result checked(PGconn* conn, PGresult* res) {
  if (res == nullptr)
    throw make_error(conn, nullptr);
  switch (PQresultStatus(res)) {
    case PGRES_COMMAND_OK:
    case PGRES_TUPLES_OK:
    case PGRES_EMPTY_QUERY:
    case PGRES_SINGLE_TUPLE:
      return result{res};
    default: {
      auto err = make_error(conn, res);
      PQclear(res);
      throw err;
    }
  }
}

} // namespace

result connection::exec(std::string_view sql) {
  std::string stmt{sql};
  return checked(impl_->conn, PQexec(impl_->conn, stmt.c_str()));
}

result connection::exec(const std::string& sql,
                        const std::vector<param>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (auto& p : params)
    values.push_back(p ? p->c_str() : nullptr);
  return checked(impl_->conn,
                 PQexecParams(impl_->conn, sql.c_str(),
                              static_cast<int>(values.size()), nullptr,
                              values.data(), nullptr, nullptr, 0));
}

int64_t connection::copy_in(const std::string& sql, std::string_view data) {
  auto* conn = impl_->conn;
  PGresult* start = PQexec(conn, sql.c_str());
  if (start == nullptr || PQresultStatus(start) != PGRES_COPY_IN) {
    auto status = start != nullptr ? PQresultStatus(start) : PGRES_FATAL_ERROR;
    if (status == PGRES_COPY_OUT) {
      // COPY ... TO STDOUT: drain it, so that the connection stays usable.
      PQclear(start);
      char* row = nullptr;
      while (PQgetCopyData(conn, &row, 0) > 0)
        PQfreemem(row);
      while (PGresult* res = PQgetResult(conn))
        PQclear(res);
    } else {
      // An error, or a statement that is not COPY at all.
      auto res = checked(conn, start);
    }
    throw invalid_argument("copy_in needs a COPY ... FROM STDIN statement");
  }
  PQclear(start);
  // Slices keep libpq's output buffer small; in blocking mode each call
  // returns once its data is sent or buffered.
  constexpr size_t slice = 256 * 1024;
  bool failed = false;
  for (size_t pos = 0; pos < data.size() && !failed; pos += slice) {
    auto n = std::min(slice, data.size() - pos);
    failed = PQputCopyData(conn, data.data() + pos, static_cast<int>(n)) != 1;
  }
  // After a failed send, PQputCopyEnd/PQgetResult report the cause.
  if (PQputCopyEnd(conn, failed ? "client failed to send COPY data" : nullptr)
      != 1)
    throw make_error(conn, nullptr);
  std::optional<error> first_error;
  int64_t rows = 0;
  while (PGresult* res = PQgetResult(conn)) {
    if (!first_error) {
      try {
        rows = checked(conn, res).affected_rows();
      } catch (const error& e) {
        first_error = e;
      }
    } else {
      PQclear(res);
    }
  }
  if (first_error)
    throw *first_error;
  return rows;
}

void connection::impl::prepare(const std::string& name,
                               const std::string& sql, int nparams) {
  if (prepared.count(name) > 0)
    return;
  checked(conn, PQprepare(conn, name.c_str(), sql.c_str(), nparams, nullptr));
  prepared.insert(name);
}

result connection::exec_prepared(const std::string& name,
                                 const std::string& sql,
                                 const std::vector<param>& params) {
  impl_->prepare(name, sql, static_cast<int>(params.size()));
  std::vector<const char*> values;
  values.reserve(params.size());
  for (auto& p : params)
    values.push_back(p ? p->c_str() : nullptr);
  return checked(impl_->conn,
                 PQexecPrepared(impl_->conn, name.c_str(),
                                static_cast<int>(values.size()), values.data(),
                                nullptr, nullptr, 0));
}

void connection::set_statement_timeout(std::chrono::milliseconds timeout) {
  query("SELECT set_config('statement_timeout', $1, false)",
        std::to_string(timeout.count()));
}

std::vector<std::string> connection::take_notices() {
  std::vector<std::string> out(impl_->notices.begin(), impl_->notices.end());
  impl_->notices.clear();
  return out;
}

bool connection::is_open() const noexcept {
  return impl_ && impl_->conn && PQstatus(impl_->conn) == CONNECTION_OK;
}

const std::string& connection::target() const noexcept {
  return impl_->target;
}

int connection::backend_pid() const noexcept {
  return PQbackendPID(impl_->conn);
}

pg_conn* connection::native() noexcept {
  return impl_->conn;
}

bool connection::in_transaction() const noexcept {
  auto st = PQtransactionStatus(impl_->conn);
  return st == PQTRANS_INTRANS || st == PQTRANS_INERROR
         || st == PQTRANS_ACTIVE;
}

namespace {

// Waits until the socket of `conn` is ready for `events` (POLLIN/POLLOUT)
// or `timeout_ms` passes (-1: forever). Returns the ready events, 0 on
// timeout; throws on a broken socket.
short wait_socket(PGconn* conn, short events, int timeout_ms) {
  int fd = PQsocket(conn);
  if (fd < 0)
    throw error{errc::connection, "", "connection has no socket"};
  pollfd pfd{fd, events, 0};
  for (;;) {
    int rc = ::poll(&pfd, 1, timeout_ms);
    if (rc > 0)
      return pfd.revents;
    if (rc == 0)
      return 0;
    if (errno != EINTR)
      throw error{errc::connection, "", "poll on the connection failed"};
  }
}

// Restores blocking mode and leaves pipeline mode when a pipeline ends,
// however it ends. A pipeline that cannot be left (its results are out of
// step with what was sent) closes the connection: its owner reconnects,
// rather than sending on a session in an unknown state.
struct pipeline_guard {
  PGconn*& conn;
  ~pipeline_guard() {
    if (conn == nullptr)
      return;
    if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF) {
      // Drain whatever is left so that the connection can leave the mode.
      // Two nulls in a row mean nothing more will come.
      int nulls = 0;
      while (PQstatus(conn) == CONNECTION_OK && nulls < 2) {
        PGresult* r = PQgetResult(conn);
        if (r == nullptr) {
          if (PQexitPipelineMode(conn) == 1)
            break;
          ++nulls;
          continue;
        }
        nulls = 0;
        PQclear(r);
      }
      if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF) {
        PQfinish(conn);
        conn = nullptr;
        return;
      }
    }
    PQsetnonblocking(conn, 0);
  }
};

} // namespace

std::vector<result>
connection::pipeline(const std::vector<statement>& statements) {
  auto* conn = impl_->conn;
  std::vector<result> out;
  if (statements.empty())
    return out;
  for (auto& st : statements)
    if (!st.name.empty())
      impl_->prepare(st.name, st.sql, static_cast<int>(st.params.size()));
  if (PQenterPipelineMode(conn) != 1)
    throw make_error(conn, nullptr);
  pipeline_guard guard{impl_->conn};
  // Non-blocking sends, so that a large pipeline cannot deadlock with the
  // server blocked on writing results we are not reading yet.
  PQsetnonblocking(conn, 1);
  for (auto& st : statements) {
    std::vector<const char*> values;
    values.reserve(st.params.size());
    for (auto& p : st.params)
      values.push_back(p ? p->c_str() : nullptr);
    auto n = static_cast<int>(values.size());
    int sent = st.name.empty()
                 ? PQsendQueryParams(conn, st.sql.c_str(), n, nullptr,
                                     values.data(), nullptr, nullptr, 0)
                 : PQsendQueryPrepared(conn, st.name.c_str(), n, values.data(),
                                       nullptr, nullptr, 0);
    if (sent != 1)
      throw make_error(conn, nullptr);
  }
  if (PQpipelineSync(conn) != 1)
    throw make_error(conn, nullptr);
  for (;;) {
    int rc = PQflush(conn);
    if (rc == 0)
      break;
    if (rc < 0)
      throw make_error(conn, nullptr);
    auto ready = wait_socket(conn, POLLIN | POLLOUT, -1);
    if ((ready & POLLIN) != 0 && PQconsumeInput(conn) != 1)
      throw make_error(conn, nullptr);
  }
  PQsetnonblocking(conn, 0);
  std::optional<error> first_error;
  size_t index = 0;
  for (;;) {
    PGresult* res = PQgetResult(conn);
    if (res == nullptr) {
      // End of one statement's results. A lost connection ends every
      // statement this way and never delivers the sync: report it instead
      // of waiting for it.
      if (PQstatus(conn) != CONNECTION_OK) {
        if (first_error && first_error->code() == errc::connection)
          throw *first_error;
        throw error{errc::connection, "",
                    "connection to " + impl_->target
                      + " lost: " + trim(PQerrorMessage(conn))};
      }
      if (++index > statements.size()) {
        // The session is in an unknown state (the guard closes it).
        if (first_error)
          throw *first_error;
        throw error{errc::connection, "",
                    "pipeline results out of step with its statements on "
                      + impl_->target};
      }
      continue;
    }
    auto status = PQresultStatus(res);
    if (status == PGRES_PIPELINE_SYNC) {
      PQclear(res);
      break;
    }
    if (index >= statements.size()) {
      PQclear(res);
      continue;
    }
    if (status == PGRES_PIPELINE_ABORTED) {
      PQclear(res);
      if (!first_error)
        first_error = error{errc::other, "", "pipeline aborted"};
      out.emplace_back(nullptr);
      continue;
    }
    if (status == PGRES_FATAL_ERROR) {
      if (!first_error) {
        first_error = make_error(conn, res);
        first_error->set_statement_index(static_cast<int>(index));
      }
      PQclear(res);
      out.emplace_back(nullptr);
      continue;
    }
    out.emplace_back(res);
  }
  if (PQexitPipelineMode(conn) != 1)
    throw make_error(conn, nullptr);
  if (first_error)
    throw *first_error;
  return out;
}

void connection::listen(const std::string& channel) {
  // LISTEN takes no parameters: the identifier is validated first.
  validate_queue_name(channel);
  std::string folded;
  for (char c : channel)
    folded += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  exec("LISTEN " + folded);
}

std::vector<std::string>
connection::wait_for_notifications(std::chrono::milliseconds timeout) {
  auto* conn = impl_->conn;
  std::vector<std::string> out;
  auto collect = [&] {
    if (PQconsumeInput(conn) != 1)
      throw error{errc::connection, "",
                  "connection to " + impl_->target
                    + " lost: " + trim(PQerrorMessage(conn))};
    while (PGnotify* n = PQnotifies(conn)) {
      out.emplace_back(n->relname);
      PQfreemem(n);
    }
  };
  collect();
  if (!out.empty())
    return out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return out;
    auto ready = wait_socket(conn, POLLIN, static_cast<int>(left.count()));
    if (ready == 0)
      return out;
    collect();
    if (!out.empty())
      return out;
  }
}

// -- transaction -------------------------------------------------------------

transaction::transaction(connection& conn) : conn_(conn) {
  conn_.exec("BEGIN");
}

transaction::~transaction() {
  if (done_ || !conn_.is_open())
    return;
  try {
    conn_.exec("ROLLBACK");
  } catch (const std::exception& e) {
    spdlog::warn("rollback on {} failed: {}", conn_.target(), e.what());
  }
}

void transaction::commit() {
  done_ = true;
  conn_.exec("COMMIT");
}

} // namespace cmdbus::db
