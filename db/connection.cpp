#include "cmdbus/db/connection.hpp"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <optional>
#include <unordered_set>

#include <libpq-fe.h>

#include "cmdbus/db/libpq.hpp"
#include "cmdbus/db/pipeline.hpp"
#include "cmdbus/db/server.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::db {

using detail::checked;
using detail::make_error;
using detail::param_values;
using detail::trim;

namespace {

constexpr size_t max_kept_notices = 100;

// The lines of a libpq message as one line: "failed: Connection refused;
// Is the server running ...?".
std::string joined_lines(const std::string& text) {
  std::string out;
  size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string::npos)
      end = text.size();
    auto line = log::one_line(std::string_view{text}.substr(pos, end - pos));
    if (!line.empty()) {
      if (!out.empty())
        out += "; ";
      out += line;
    }
    pos = end + 1;
  }
  return out;
}

// "host:port" of the server `conn` reached. PQhost gives the host of the
// DSN libpq connected to (an address, a name, or a socket folder), never
// credentials.
std::string host_and_port(PGconn* conn) {
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  std::string out = host != nullptr && *host != '\0' ? host : "localhost";
  if (port != nullptr && *port != '\0')
    out += std::string{":"} + port;
  return out;
}

} // namespace

// -- connection --------------------------------------------------------------

struct connection::impl {
  PGconn* conn = nullptr;
  std::string target;
  std::deque<std::string> notices;
  std::unordered_set<std::string> prepared;
  pooler_mode pooler = pooler_mode::none;
  std::optional<std::chrono::milliseconds> reply_timeout;

  // Whether named statements and session state are allowed.
  bool keeps_session() const noexcept {
    return pooler != pooler_mode::transaction;
  }

  // Prepares `sql` as `name` unless done already on this connection.
  void prepare(const std::string& name, const std::string& sql, int nparams);

  // The result of what `send` (a PQsend* call) sent, as the PQexec* call
  // of the same arguments returns it: its last result. Without a reply
  // timeout, `exec` (the PQexec* call) runs instead.
  template <class Send, class Exec>
  result run(Send send, Exec exec) {
    if (!reply_timeout)
      return checked(conn, exec());
    auto limit = detail::limit_from_now(reply_timeout);
    if (send() != 1)
      throw make_error(conn, nullptr);
    PGresult* last = nullptr;
    try {
      for (;;) {
        detail::await_result(conn, target, limit);
        PGresult* res = PQgetResult(conn);
        if (res == nullptr)
          break;
        PQclear(last);
        last = res;
        auto st = PQresultStatus(res);
        if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH
            || PQstatus(conn) == CONNECTION_BAD)
          break;
      }
    } catch (...) {
      PQclear(last);
      throw;
    }
    return checked(conn, last);
  }

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
    log::debug("postgres {}: {}", severity, log::one_line(msg));
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
  ptr->pooler = opts.pooler;
  ptr->reply_timeout = opts.reply_timeout;
  auto timeout = std::to_string(opts.connect_timeout.count());
  // Our defaults come first so that the DSN can override them. Keepalives
  // notice a peer that vanished while we wait for a result (about a minute);
  // the TCP user timeout does the same for data the peer never
  // acknowledges, so that no call waits on a dead network for the kernel's
  // retransmission limit (many minutes).
  const char* keys[] = {"application_name",
                        "connect_timeout",
                        "keepalives",
                        "keepalives_idle",
                        "keepalives_interval",
                        "keepalives_count",
                        "tcp_user_timeout",
                        "dbname",
                        nullptr};
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
    // libpq's message may span lines ("\n\tIs the server running..."); the
    // error is one line, as the tools print it.
    auto msg = trim(PQerrorMessage(ptr->conn));
    // A refused login keeps the connection class (the runtime retries it
    // like any other) and carries its SQLSTATE for the tools' messages.
    throw error{errc::connection, login_failure_sqlstate(msg),
                "cannot connect to " + ptr->target + ": " + joined_lines(msg)};
  }
  PQsetNoticeReceiver(ptr->conn, &impl::on_notice, ptr.get());
  connection result{std::move(ptr)};
  // Timestamps are parsed from ISO output whatever the server's default.
  // Poolers keep this one for their clients (PgBouncer tracks DateStyle
  // like client_encoding and TimeZone, in every pooling mode).
  result.exec("SET datestyle TO 'ISO, MDY'");
  if (opts.statement_timeout && result.impl_->keeps_session())
    result.set_statement_timeout(*opts.statement_timeout);
  log::debug("connected to {} on {}", result.target(), server_of(result));
  return result;
}

result connection::exec(std::string_view sql) {
  std::string stmt{sql};
  auto* c = impl_->conn;
  return impl_->run([&] { return PQsendQuery(c, stmt.c_str()); },
                    [&] { return PQexec(c, stmt.c_str()); });
}

result connection::exec(const std::string& sql,
                        const std::vector<param>& params) {
  auto values = param_values(params);
  auto* c = impl_->conn;
  auto n = static_cast<int>(values.size());
  return impl_->run(
    [&] {
      return PQsendQueryParams(c, sql.c_str(), n, nullptr, values.data(),
                               nullptr, nullptr, 0);
    },
    [&] {
      return PQexecParams(c, sql.c_str(), n, nullptr, values.data(), nullptr,
                          nullptr, 0);
    });
}

int64_t connection::copy_in(const std::string& sql, std::string_view data) {
  auto* conn = impl_->conn;
  const auto& target = impl_->target;
  // The server has the reply timeout (connection_options) for each step:
  // to start the COPY, to take each slice of the data (a server that stops
  // reading fills the socket), and to end it. Without one, each step waits
  // as long as it takes.
  auto limit = [this] { return detail::limit_from_now(impl_->reply_timeout); };
  auto next_result = [&](const std::optional<detail::reply_limit>& within) {
    detail::await_result(conn, target, within);
    return PQgetResult(conn);
  };
  auto drain = [&](const std::optional<detail::reply_limit>& within) {
    while (PGresult* res = next_result(within))
      PQclear(res);
  };
  if (PQsendQuery(conn, sql.c_str()) != 1)
    throw make_error(conn, nullptr);
  auto started = limit();
  PGresult* start = next_result(started);
  if (start == nullptr)
    throw make_error(conn, nullptr);
  if (PQresultStatus(start) != PGRES_COPY_IN) {
    if (PQresultStatus(start) == PGRES_COPY_OUT) {
      // COPY ... TO STDOUT: drain it, so that the connection stays usable.
      PQclear(start);
      char* row = nullptr;
      while (PQgetCopyData(conn, &row, 0) > 0)
        PQfreemem(row);
      drain(started);
    } else {
      // An error, or a statement that is not COPY at all.
      std::optional<error> failure;
      try {
        checked(conn, start);
      } catch (const error& e) {
        failure = e;
      }
      drain(started);
      if (failure)
        throw *failure;
    }
    throw invalid_argument("copy_in needs a COPY ... FROM STDIN statement");
  }
  PQclear(start);
  // Non-blocking while the data goes out, so that every wait for the
  // socket has its limit; slices keep libpq's output buffer small.
  PQsetnonblocking(conn, 1);
  struct blocking_again {
    PGconn* conn;
    ~blocking_again() {
      PQsetnonblocking(conn, 0);
    }
  } restore{conn};
  constexpr size_t slice = 256 * 1024;
  bool failed = false;
  for (size_t pos = 0; pos < data.size() && !failed; pos += slice) {
    auto n = static_cast<int>(std::min(slice, data.size() - pos));
    auto within = limit();
    int rc = 0;
    while ((rc = PQputCopyData(conn, data.data() + pos, n)) == 0)
      detail::flush(conn, target, within);
    failed = rc != 1;
  }
  // After a failed send, PQputCopyEnd/PQgetResult report the cause.
  auto ended = limit();
  int rc = 0;
  while ((rc = PQputCopyEnd(conn, failed ? "client failed to send COPY data"
                                         : nullptr))
         == 0)
    detail::flush(conn, target, ended);
  if (rc != 1)
    throw make_error(conn, nullptr);
  detail::flush(conn, target, ended);
  std::optional<error> first_error;
  int64_t rows = 0;
  while (PGresult* res = next_result(ended)) {
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

void connection::impl::prepare(const std::string& name, const std::string& sql,
                               int nparams) {
  if (prepared.count(name) > 0)
    return;
  run(
    [&] {
      return PQsendPrepare(conn, name.c_str(), sql.c_str(), nparams, nullptr);
    },
    [&] { return PQprepare(conn, name.c_str(), sql.c_str(), nparams, nullptr); });
  prepared.insert(name);
}

result connection::exec_prepared(const std::string& name,
                                 const std::string& sql,
                                 const std::vector<param>& params) {
  if (!impl_->keeps_session())
    return exec(sql, params);
  impl_->prepare(name, sql, static_cast<int>(params.size()));
  auto values = param_values(params);
  auto* c = impl_->conn;
  auto n = static_cast<int>(values.size());
  return impl_->run(
    [&] {
      return PQsendQueryPrepared(c, name.c_str(), n, values.data(), nullptr,
                                 nullptr, 0);
    },
    [&] {
      return PQexecPrepared(c, name.c_str(), n, values.data(), nullptr, nullptr,
                            0);
    });
}

void connection::set_statement_timeout(std::chrono::milliseconds timeout) {
  if (!impl_->keeps_session())
    throw invalid_argument(
      "cannot set statement_timeout per session behind a transaction pooler: "
      "set it for the role or the database instead");
  query("SELECT set_config('statement_timeout', $1, false)",
        std::to_string(timeout.count()));
}

pooler_mode connection::pooler() const noexcept {
  return impl_->pooler;
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

std::string server_of(connection& conn) {
  return host_and_port(conn.native());
}

int connection::backend_pid() const noexcept {
  return PQbackendPID(impl_->conn);
}

pg_conn* connection::native() noexcept {
  return impl_->conn;
}

bool connection::in_transaction() const noexcept {
  auto st = PQtransactionStatus(impl_->conn);
  return st == PQTRANS_INTRANS || st == PQTRANS_INERROR || st == PQTRANS_ACTIVE;
}

// -- pipeline mode -----------------------------------------------------------

std::vector<result>
connection::pipeline(const std::vector<statement>& statements) {
  if (statements.empty())
    return {};
  if (!impl_->keeps_session()) {
    // Unnamed: the pooler may give the next pipeline another server session.
    auto unnamed = statements;
    for (auto& st : unnamed)
      st.name.clear();
    return detail::run_pipeline(impl_->conn, impl_->target, unnamed,
                                detail::limit_from_now(impl_->reply_timeout));
  }
  for (auto& st : statements)
    if (!st.name.empty())
      impl_->prepare(st.name, st.sql, static_cast<int>(st.params.size()));
  return detail::run_pipeline(impl_->conn, impl_->target, statements,
                              detail::limit_from_now(impl_->reply_timeout));
}

void check_pooled_statement_timeout(connection& conn,
                                    std::chrono::milliseconds wanted) {
  if (conn.pooler() != pooler_mode::transaction)
    return;
  // pg_settings shows statement_timeout in milliseconds.
  auto ms = conn
              .exec("SELECT setting::bigint FROM pg_catalog.pg_settings "
                    "WHERE name = 'statement_timeout'")
              .int64(0, 0);
  if (ms > 0 && ms <= wanted.count())
    return;
  auto want = std::to_string(wanted.count()) + "ms";
  throw invalid_argument(
    "pooler = transaction: connections cannot set statement-timeout (" + want
    + ") per session, and the server's statement_timeout is "
    + (ms == 0 ? std::string{"0 (none)"} : std::to_string(ms) + "ms")
    + "; set it to at most " + want
    + " for the role or the database (ALTER ROLE ... SET statement_timeout = '"
    + want + "'), or in the pooler's connect_query");
}

} // namespace cmdbus::db
