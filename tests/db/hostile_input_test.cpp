// Hostile input on a command queue: messages put on `{domain}__commands`
// directly with pgmq.send (not through command_bus::send), read by a real
// worker. Whatever a message holds (not a JSON object, missing or ill-typed
// fields, 10 MiB and more, nesting as deep as the server accepts, a type
// without a handler, SQL-looking text, another domain's command id), it
// ends archived on receive (audit RECEIVE_SKIPPED when it names a command
// id), archived with its command in the troubleshooting queue (audit
// MOVED_TO_TSQ), or, when it is a valid command after all, completed. The
// worker keeps going: good commands sent with the bus before, between and
// after the hostile messages complete, and so does one sent once everything
// else was handled. State is checked with SQL.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/handler_registry.hpp"
#include "actors/worker.hpp"
#include "config/worker_config.hpp"
#include "db/command_bus.hpp"
#include "db/connection.hpp"
#include "db/error.hpp"
#include "db/pool.hpp"
#include "db/queue_name.hpp"
#include "model/json.hpp"
#include "model/types.hpp"
#include "model/uuid.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;
using test::eventually;

namespace {

using opt_str = std::optional<std::string>;
using strings = std::vector<std::string>;

const opt_str tsq{"IN_TROUBLESHOOTING_QUEUE"};

/// Text that would do harm if it ever reached SQL unquoted: quotes,
/// comments, placeholders, dollar quoting, backslashes, control characters.
const std::string nasty = "'; DROP TABLE commandbus.command; -- $1 \\ \\\\' \""
                          " ' OR '1'='1 $$; DROP SCHEMA pgmq CASCADE; $$ "
                          "%s\t\r\n\x01\x1f\x7f";

/// A domain of one test, its bus, a connection for checks, and a worker
/// whose "Ok" handler returns the command's data as its result.
class HostileInput : public ::testing::Test {
protected:
  HostileInput()
      : pool_(pool_options()), bus_(pool_), conn(test::connect()),
        d(test::unique_name("hostile")), q(db::command_queue(d)) {
    // nop
  }

  ~HostileInput() override {
    if (w_ && w_->is_running())
      w_->stop(10s).get();
  }

  static db::pool_options pool_options() {
    db::pool_options opts;
    opts.dsn = test::dsn();
    opts.max_size = 2;
    return opts;
  }

  send_request request(const std::string& domain, const std::string& type,
                       int max_attempts = 3) {
    send_request req;
    req.domain = domain;
    req.command_type = type;
    req.command_id = uuid::random();
    req.max_attempts = max_attempts;
    return req;
  }

  /// Sends a good "Ok" command of `domain` with the bus.
  void good(const std::string& domain) {
    goods_.emplace_back(domain, bus_.send(request(domain, "Ok")).command_id);
  }
  void good() {
    good(d);
  }

  /// Creates the row of a `type` command with the bus and deletes its
  /// message: the one the test puts is then the only message naming it.
  uuid row(const std::string& type = "Ok", int max_attempts = 3) {
    auto sent = bus_.send(request(d, type, max_attempts));
    conn.query("SELECT pgmq.delete($1, $2::bigint)", q,
               static_cast<long long>(sent.msg_id));
    return sent.command_id;
  }

  /// `tmpl` with $ID replaced by `id`, $HEX by `id` without hyphens, $UID
  /// by `id` in upper case and $D by the domain.
  std::string fill(std::string tmpl, const uuid& id = {}) const {
    auto text = id.to_string();
    auto hex = text;
    hex.erase(std::remove(hex.begin(), hex.end(), '-'), hex.end());
    auto upper = text;
    std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
    for (auto [key, value] :
         {std::pair{"$ID", text}, {"$HEX", hex}, {"$UID", upper}, {"$D", d}})
      for (auto i = tmpl.find(key); i != std::string::npos;
           i = tmpl.find(key, i + value.size()))
        tmpl.replace(i, std::string{key}.size(), value);
    return tmpl;
  }

  /// Puts `message` (JSON text, or SQL NULL) on the queue with pgmq.send;
  /// returns its msg_id.
  int64_t put(const opt_str& message) {
    return conn.query("SELECT pgmq.send($1, $2::jsonb)", q, message)
        .int64(0, 0);
  }

  /// `x` as a JSON string literal (the server quotes it).
  std::string jstr(const std::string& x) {
    return *scalar("SELECT to_jsonb($1::text)::text", x);
  }

  /// Runs a worker for `domains` (default: the test's) until every good
  /// command completed and the queues are empty, then sends one more good
  /// command per domain and waits for it as well.
  void run(strings domains = {}) {
    if (domains.empty())
      domains = {d};
    handler_registry reg;
    for (auto& dom : domains)
      reg.add(dom, "Ok", [this](const command& cmd, handler_context&) {
        auto size = cmd.data.text().size();
        for (auto seen = biggest.load();
             size > seen && !biggest.compare_exchange_weak(seen, size);) {
          // retry
        }
        return cmd.data;
      });
    config::worker_config cfg;
    cfg.dsn = test::dsn();
    cfg.domains = domains;
    cfg.concurrency = 4;
    cfg.visibility_timeout = 30s;
    cfg.poll_interval = 100ms;
    cfg.statement_timeout = 10s;
    cfg.flush_interval = 2ms;
    cfg.retry.backoff_seconds = {0};
    cfg.retry.jitter = 0.0;
    w_ = std::make_unique<worker>(cfg, std::move(reg));
    w_->start();
    auto settled = [&] {
      for (auto& [dom, id] : goods_)
        if (column(id, "status", dom) != opt_str{"COMPLETED"})
          return false;
      for (auto& dom : domains)
        if (*scalar("SELECT count(*) FROM pgmq.q_" + db::command_queue(dom))
            != "0")
          return false;
      return true;
    };
    ASSERT_TRUE(eventually(settled, 60s)) << "a good command or a message is "
                                             "left";
    for (auto& dom : domains)
      good(dom);
    ASSERT_TRUE(eventually(settled, 30s)) << "the worker stopped processing";
    w_->stop(10s).get();
    EXPECT_EQ(w_->stats().db_errors, 0);
    EXPECT_EQ(w_->in_flight_count(), 0u);
  }

  // -- checks ----------------------------------------------------------------

  template <class... Ts>
  opt_str scalar(const std::string& sql, const Ts&... xs) {
    auto r = conn.query(sql, xs...);
    if (r.rows() == 0 || r.is_null(0, 0))
      return std::nullopt;
    return std::string{r.text(0, 0)};
  }

  opt_str column(const uuid& id, const std::string& col,
                 const std::string& domain = {}) {
    return scalar("SELECT " + col
                      + "::text FROM commandbus.command WHERE domain = $1 AND "
                        "command_id = $2::uuid",
                  domain.empty() ? d : domain, id.to_string());
  }

  strings events(const uuid& id, const std::string& domain = {}) {
    auto r = conn.query("SELECT event_type FROM commandbus.audit WHERE domain "
                        "= $1 AND command_id = $2::uuid ORDER BY ts, audit_id",
                        domain.empty() ? d : domain, id.to_string());
    strings out;
    for (int i = 0; i < r.rows(); ++i)
      out.emplace_back(r.text(i, 0));
    return out;
  }

  /// `details_json ->> key` of the last audit event `event` of `id`.
  opt_str detail(const uuid& id, const std::string& event,
                 const std::string& key) {
    return scalar("SELECT details_json ->> $4 FROM commandbus.audit WHERE "
                  "domain = $1 AND command_id = $2::uuid AND event_type = $3 "
                  "ORDER BY ts DESC, audit_id DESC LIMIT 1",
                  d, id.to_string(), event, key);
  }

  /// Whether message `msg_id` is in the archive holding exactly `message`.
  bool archived_as(int64_t msg_id, const opt_str& message) {
    return scalar("SELECT (message IS NOT DISTINCT FROM $2::jsonb)::text FROM "
                  "pgmq.a_"
                      + q + " WHERE msg_id = $1",
                  static_cast<long long>(msg_id), message)
           == opt_str{"true"};
  }

  bool in_archive(int64_t msg_id) {
    return scalar("SELECT count(*) FROM pgmq.a_" + q + " WHERE msg_id = $1",
                  static_cast<long long>(msg_id))
           == opt_str{"1"};
  }

  int64_t skipped_audits() {
    return std::stoll(*scalar("SELECT count(*) FROM commandbus.audit WHERE "
                              "domain = $1 AND event_type = 'RECEIVE_SKIPPED'",
                              d));
  }

  /// The message was archived on receive as naming no command of the
  /// domain: audit RECEIVE_SKIPPED {msg_id, reason UNKNOWN_COMMAND, status
  /// null} under its command id.
  void expect_unknown(int64_t msg_id, const opt_str& message, const uuid& id) {
    EXPECT_TRUE(archived_as(msg_id, message)) << "msg_id " << msg_id;
    EXPECT_EQ(scalar("SELECT count(*) FROM commandbus.audit WHERE domain = $1 "
                     "AND command_id = $2::uuid AND event_type = "
                     "'RECEIVE_SKIPPED' AND details_json = jsonb_build_object("
                     "'msg_id', $3::bigint, 'reason', 'UNKNOWN_COMMAND', "
                     "'status', NULL)",
                     d, id.to_string(), static_cast<long long>(msg_id)),
              opt_str{"1"})
        << "msg_id " << msg_id;
  }

  /// The message claimed its command but is no usable command of this
  /// domain: archived, the command in the TSQ as a permanent INVALID_MESSAGE
  /// failure with `why`, no handler run.
  void expect_invalid_message(int64_t msg_id, const opt_str& message,
                              const uuid& id, const std::string& why) {
    EXPECT_TRUE(archived_as(msg_id, message)) << "msg_id " << msg_id;
    EXPECT_EQ(column(id, "status"), tsq);
    EXPECT_EQ(column(id, "last_error_type"), opt_str{"PERMANENT"});
    EXPECT_EQ(column(id, "last_error_code"), opt_str{"INVALID_MESSAGE"});
    EXPECT_EQ(column(id, "last_error_msg"), opt_str{why});
    EXPECT_EQ(events(id), (strings{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "msg_id"),
              opt_str{std::to_string(msg_id)});
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "error_code"),
              opt_str{"INVALID_MESSAGE"});
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "error_msg"), opt_str{why});
  }

  /// The message was handled: deleted, its command COMPLETED.
  void expect_completed(int64_t msg_id, const uuid& id) {
    EXPECT_FALSE(in_archive(msg_id)) << "msg_id " << msg_id;
    EXPECT_EQ(column(id, "status"), opt_str{"COMPLETED"});
    EXPECT_EQ(events(id), (strings{"SENT", "RECEIVED", "COMPLETED"}));
  }

  db::pool pool_;
  command_bus bus_;
  db::connection conn;
  std::string d;
  std::string q;
  std::vector<std::pair<std::string, uuid>> goods_;
  std::unique_ptr<worker> w_;
  /// The largest `data` an "Ok" handler saw, in bytes of JSON text.
  std::atomic<size_t> biggest{0};
};

using members = std::vector<std::pair<std::string, std::string>>;

/// A command message for $ID of the test's domain ($D) and type "Ok" with
/// each member of `changes` (name, JSON value) added, or replacing one of
/// those three, or removing it when the value is empty.
std::string with(const members& changes) {
  members out = {{"domain", "\"$D\""},
                 {"command_type", "\"Ok\""},
                 {"command_id", "\"$ID\""}};
  for (auto& [name, value] : changes) {
    auto i = std::find_if(out.begin(), out.end(),
                          [&](auto& m) { return m.first == name; });
    if (i == out.end())
      out.emplace_back(name, value);
    else if (value.empty())
      out.erase(i);
    else
      i->second = value;
  }
  std::string text;
  for (auto& [name, value] : out)
    text += (text.empty() ? "{\"" : ",\"") + name + "\":" + value;
  return text + "}";
}

std::string with(const std::string& name = {}, const std::string& value = {}) {
  return name.empty() ? with(members{}) : with(members{{name, value}});
}

/// The error of a message that names another domain than its queue's.
std::string not_ours(const std::string& domain) {
  return "field \"domain\" is not the queue's domain \"" + domain + "\"";
}

} // namespace

TEST_F(HostileInput, NotAnObjectOrNoUsableCommandIdIsArchivedWithoutAudit) {
  // Not an object (SQL NULL too), then objects without a usable command id.
  // clang-format off
  std::vector<opt_str> messages = {
    "[1,2]", R"("text")", "42", "null", "true", std::nullopt,
    "{}", R"({"domain":"x","command_type":"Ok"})", R"({"command_id":42})",
    R"({"command_id":null})", R"({"command_id":{"x":1}})",
    R"({"command_id":""})", R"({"command_id":"not-a-uuid"})",
    fill(R"({"command_id":" $ID"})", uuid::random())};
  // clang-format on
  messages.push_back(R"({"command_id":)" + jstr(nasty) + "}");
  std::vector<int64_t> ids;
  good();
  for (auto& m : messages) {
    ids.push_back(put(m));
    good();
  }
  run();
  for (size_t i = 0; i < messages.size(); ++i)
    EXPECT_TRUE(archived_as(ids[i], messages[i]))
        << "message " << messages[i].value_or("SQL NULL");
  EXPECT_EQ(skipped_audits(), 0);
  EXPECT_EQ(w_->stats().rejected, static_cast<int64_t>(messages.size()));
}

TEST_F(HostileInput, IllTypedFieldsOfAKnownCommandMoveItToTsq) {
  // Each message names its own command row; `why` is the stored error
  // message, or empty where the message is a valid command after all.
  struct hostile_case {
    const char* name;
    std::string message;
    std::string why;
  };
  // clang-format off
  std::vector<hostile_case> cases = {
    {"no_domain", with("domain"), R"(missing field "domain")"},
    {"domain_number", with("domain", "7"), R"(field "domain" must be a string)"},
    {"domain_of_another", with("domain", R"("other")"), not_ours("$D")},
    {"no_command_type", with("command_type"), R"(missing field "command_type")"},
    {"command_type_number", with("command_type", "42"), R"(field "command_type" must be a string)"},
    {"command_type_null", with("command_type", "null"), R"(field "command_type" must be a string)"},
    // PostgreSQL's uuid syntax, which claimed the row, is wider than ours.
    {"command_id_braced", with("command_id", R"("{$ID}")"), R"(field "command_id" is not a valid UUID: "{$ID}")"},
    {"command_id_no_hyphens", with("command_id", R"("$HEX")"), R"(field "command_id" is not a valid UUID: "$HEX")"},
    {"data_array", with("data", "[1]"), R"(field "data" must be an object)"},
    {"data_string", with("data", R"("{}")"), R"(field "data" must be an object)"},
    {"data_null", with("data", "null"), R"(field "data" must be an object)"},
    {"data_number", with("data", "1"), R"(field "data" must be an object)"},
    {"correlation_id_number", with("correlation_id", "5"), R"(field "correlation_id" must be a string or null)"},
    {"correlation_id_object", with("correlation_id", "{}"), R"(field "correlation_id" must be a string or null)"},
    {"correlation_id_not_uuid", with("correlation_id", R"("nope")"), R"(field "correlation_id" is not a valid UUID: "nope")"},
    {"reply_to_number", with("reply_to", "5"), R"(field "reply_to" must be a string or null)"},
    {"reply_to_array", with("reply_to", R"(["q"])"), R"(field "reply_to" must be a string or null)"},
    {"reply_to_not_a_queue_name", with("reply_to", R"("no such/queue")"), R"(field "reply_to" may contain only ASCII letters, digits and underscores)"},
    {"reply_to_too_long", with("reply_to", "\"" + std::string(48, 'q') + "\""), R"(field "reply_to" is longer than 47 characters)"},
    // Valid after all.
    {"correlation_id_null", with("correlation_id", "null"), ""},
    {"reply_to_null", with("reply_to", "null"), ""},
    {"reply_to_empty", with("reply_to", R"("")"), ""},
    {"no_data", with(), ""},
    {"unknown_members", with("headers", R"({"x":[1]})"), ""},
    {"command_id_upper_case", with("command_id", R"("$UID")"), ""},
  };
  // clang-format on
  std::vector<std::pair<uuid, int64_t>> sent;
  good();
  for (auto& c : cases) {
    auto id = row();
    sent.emplace_back(id, put(fill(c.message, id)));
    good();
  }
  run();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    auto [id, msg_id] = sent[i];
    if (cases[i].why.empty())
      expect_completed(msg_id, id);
    else
      expect_invalid_message(msg_id, fill(cases[i].message, id), id,
                             fill(cases[i].why, id));
  }
}

TEST_F(HostileInput, TenMebibytesAreHandledAndMoreThanSixteenMoveToTsq) {
  auto payload = [](size_t bytes) {
    return with("data", R"({"blob":")" + std::string(bytes, 'x') + "\"}");
  };
  auto known = row();
  auto unknown = uuid::random();
  auto too_big = row();
  good();
  auto m_known = put(fill(payload(10 << 20), known));
  good();
  auto m_unknown = put(fill(payload(10 << 20), unknown));
  good();
  auto m_too_big = put(fill(payload(17 << 20), too_big));
  good();
  run();
  expect_completed(m_known, known);
  EXPECT_GE(biggest.load(), size_t{10} << 20);
  expect_unknown(m_unknown, fill(payload(10 << 20), unknown), unknown);
  expect_invalid_message(m_too_big, fill(payload(17 << 20), too_big), too_big,
                         "message larger than 16777216 bytes");
}

TEST_F(HostileInput, NestingAsDeepAsTheServerAcceptsIsRefusedOrSkipped) {
  // `data` nested k objects deep ({"a":{"a":...{"a":1}...}}) in a message,
  // which adds one level.
  auto message = [](size_t k) {
    std::string data;
    for (size_t i = 0; i < k; ++i)
      data += R"({"a":)";
    return with("data", data + "1" + std::string(k, '}'));
  };
  // Whether the server refuses it at its stack depth limit (jsonb's parser
  // recurses).
  auto refused = [&](const std::string& sql, size_t k) {
    try {
      conn.query(sql, q, fill(message(k), uuid::random()));
      return false;
    } catch (const db::error& e) {
      if (e.sqlstate() != "54001")
        throw;
      return true;
    }
  };
  EXPECT_TRUE(refused("SELECT pgmq.send($1, $2::jsonb)", 100000));
  auto parse = "SELECT $1 <> '' AND $2::jsonb IS NOT NULL";
  size_t deepest = 64; // accepted; deepest + step is refused
  ASSERT_FALSE(refused(parse, deepest));
  for (size_t step = 65536; step > 0; step /= 2)
    if (deepest + step < 100000 && !refused(parse, deepest + step))
      deepest += step;
  EXPECT_GT(deepest, 1000u) << "the server refuses shallow nesting";
  auto deep = row();
  auto unknown = uuid::random();
  auto at_limit = row();
  auto over_limit = row();
  good();
  auto m_deep = put(fill(message(deepest), deep));
  good();
  auto m_unknown = put(fill(message(deepest), unknown));
  good();
  // Our decoders take 64 levels in all and refuse the 65th.
  auto m_at_limit = put(fill(message(63), at_limit));
  auto m_over_limit = put(fill(message(64), over_limit));
  good();
  run();
  expect_invalid_message(m_deep, fill(message(deepest), deep), deep,
                         "nesting deeper than 64 levels");
  expect_unknown(m_unknown, fill(message(deepest), unknown), unknown);
  expect_completed(m_at_limit, at_limit);
  expect_invalid_message(m_over_limit, fill(message(64), over_limit),
                         over_limit, "nesting deeper than 64 levels");
}

TEST_F(HostileInput, TypeWithoutHandlerIsExhaustedIntoTsq) {
  // A row of an unhandled type, and an "Ok" row whose message names one.
  auto row_type = row("Nope", 1);
  auto message_type = row("Ok", 1);
  auto text = with("command_type", R"("Nope")");
  good();
  auto m1 = put(fill(text, row_type));
  good();
  auto m2 = put(fill(text, message_type));
  good();
  run();
  for (auto [id, msg_id] : {std::pair{row_type, m1}, {message_type, m2}}) {
    EXPECT_TRUE(archived_as(msg_id, fill(text, id)));
    EXPECT_EQ(column(id, "status"), tsq);
    EXPECT_EQ(events(id), (strings{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "reason"), opt_str{"EXHAUSTED"});
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "error_code"),
              opt_str{"HandlerNotFoundError"});
    EXPECT_EQ(column(id, "last_error_msg"),
              opt_str{"no handler registered for " + d + "/Nope"});
  }
}

TEST_F(HostileInput, SqlLookingTextStaysDataAndIsStoredVerbatim) {
  auto s = jstr(nasty);
  auto replies = d + "__replies";
  auto data = "{" + s + ":" + s + R"(,"list":[)" + s + "," + s + "]}";
  auto in_data = row();
  auto in_type = row("Ok", 1);
  auto in_correlation = row();
  auto in_domain = row();
  auto in_reply_to = row();
  std::vector<std::pair<uuid, std::string>> sent = {
      {in_data, with({{"reply_to", "\"" + replies + "\""}, {"data", data}})},
      {in_type, with("command_type", s)},
      {in_correlation, with("correlation_id", s)},
      {in_domain, with("domain", s)},
      {in_reply_to, with("reply_to", s)},
      {uuid::random(), with("command_id", s)}};
  std::vector<int64_t> msg_ids;
  good();
  for (auto& [id, text] : sent) {
    msg_ids.push_back(put(fill(text, id)));
    good();
  }
  run();
  // The data went to the handler and back in the reply, unchanged.
  expect_completed(msg_ids[0], in_data);
  EXPECT_EQ(scalar("SELECT (message -> 'result' = $2::jsonb)::text FROM pgmq.q_"
                       + replies + " WHERE message ->> 'command_id' = $1",
                   in_data.to_string(), data),
            opt_str{"true"});
  // The type is kept verbatim in the error of the missing handler.
  auto no_handler = "no handler registered for " + d + "/" + nasty;
  EXPECT_EQ(column(in_type, "status"), tsq);
  EXPECT_EQ(column(in_type, "last_error_msg"), opt_str{no_handler});
  EXPECT_EQ(detail(in_type, "MOVED_TO_TSQ", "error_msg"), opt_str{no_handler});
  // The error quotes the first 40 bytes of the value.
  expect_invalid_message(msg_ids[2], fill(sent[2].second, in_correlation),
                         in_correlation,
                         "field \"correlation_id\" is not a valid UUID: \""
                             + nasty.substr(0, 40) + "\"...");
  expect_invalid_message(msg_ids[3], fill(sent[3].second, in_domain), in_domain,
                         not_ours(d));
  expect_invalid_message(msg_ids[4], fill(sent[4].second, in_reply_to),
                         in_reply_to,
                         "field \"reply_to\" may contain only ASCII letters, "
                         "digits and underscores");
  EXPECT_TRUE(archived_as(msg_ids[5], fill(sent[5].second)));
  EXPECT_EQ(skipped_audits(), 0);
  // Nothing was dropped: the tables are there with every row of the test.
  EXPECT_EQ(
      scalar("SELECT count(*) FROM commandbus.command WHERE domain = $1", d),
      opt_str{std::to_string(5 + goods_.size())});
  EXPECT_EQ(
      scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name IN ($1, $2)", q,
             replies),
      opt_str{"2"});
}

TEST_F(HostileInput, CommandIdOfAnotherDomainIsSkippedAndLeavesItAlone) {
  auto other = test::unique_name("hostile");
  // Two commands of the other domain, with their own messages on its queue;
  // on ours a message for each (naming our domain, then theirs), and one
  // for our own command naming theirs (which must not reach their handler).
  // The ids differ, so that no read sees two messages of one command.
  auto a_theirs = bus_.send(request(other, "Ok")).command_id;
  auto b_theirs = bus_.send(request(other, "Ok")).command_id;
  auto mine = row();
  auto naming_theirs = with("domain", "\"" + other + "\"");
  good();
  good(other);
  auto m1 = put(fill(with(), a_theirs));
  good();
  auto m2 = put(fill(naming_theirs, b_theirs));
  good(other);
  auto m3 = put(fill(naming_theirs, mine));
  good();
  run({d, other});
  expect_unknown(m1, fill(with(), a_theirs), a_theirs);
  expect_unknown(m2, fill(naming_theirs, b_theirs), b_theirs);
  EXPECT_EQ(skipped_audits(), 2);
  for (auto& id : {a_theirs, b_theirs}) {
    EXPECT_EQ(events(id, other), (strings{"SENT", "RECEIVED", "COMPLETED"}));
    EXPECT_EQ(column(id, "attempts", other), opt_str{"1"});
  }
  expect_invalid_message(m3, fill(naming_theirs, mine), mine, not_ours(d));
}
