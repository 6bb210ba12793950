// Tests of the set-based worker functions (sql/commandbus/V004) against a
// real PostgreSQL: receive (with the receive guard), complete, the final
// failure kinds, transient failure with backoff and the lease heartbeat. They
// check the rows the reference worker writes: status transitions, attempts,
// audit rows and their details, queue and archive contents, replies and their
// NOTIFY, and the inline batch counters with the batches that just became
// complete (see docs/design.md).
//
// Commands are sent with `command_bus`; the functions are called with
// parameterised SQL. Every test works in its own domain (and queues), so
// tests never see each other's rows.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "db/command_bus.hpp"
#include "db/connection.hpp"
#include "db/error.hpp"
#include "db/pool.hpp"
#include "db/queue_name.hpp"
#include "model/json.hpp"
#include "model/types.hpp"
#include "model/uuid.hpp"
#include "tests/support/rows.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

using opt_str = std::optional<std::string>;

// -- setup -------------------------------------------------------------------

db::pool_options pool_options() {
  db::pool_options opts;
  opts.dsn = test::dsn();
  opts.max_size = 2;
  return opts;
}

/// A pool, a bus on it, a connection for the calls under test and checks,
/// and a fresh domain with its command queue.
struct env {
  env()
    : pool(pool_options()),
      bus(pool),
      conn(test::connect()),
      domain(test::unique_name("w")),
      queue(domain + "__commands") {
    bus.ensure_queue(queue);
  }
  db::pool pool;
  command_bus bus;
  db::connection conn;
  std::string domain;
  std::string queue;
};

send_request make_req(const std::string& domain,
                      const opt_str& reply_to = std::nullopt,
                      std::optional<int> max_attempts = std::nullopt) {
  send_request req;
  req.domain = domain;
  req.command_type = "DebitAccount";
  req.command_id = uuid::random();
  req.data = json::parse(R"({"amount":100})");
  req.correlation_id = uuid::random();
  req.reply_to = reply_to;
  req.max_attempts = max_attempts;
  return req;
}

/// Sends one command; returns (command_id, msg_id).
std::pair<std::string, int64_t> send(env& e, const opt_str& reply_to = {},
                                     std::optional<int> max_attempts = {}) {
  auto res = e.bus.send(make_req(e.domain, reply_to, max_attempts));
  return {res.command_id.to_string(), res.msg_id};
}

/// Creates a batch of `n` commands; returns the batch id and the commands
/// (command_id, msg_id) in order.
std::pair<std::string, std::vector<std::pair<std::string, int64_t>>>
make_batch(env& e, int n) {
  std::vector<batch_command> cmds;
  for (int i = 0; i < n; ++i) {
    batch_command c;
    c.command_type = "DebitAccount";
    c.command_id = uuid::random();
    c.data = json::parse(R"({"amount":1})");
    cmds.push_back(c);
  }
  auto res = e.bus.create_batch(e.domain, cmds);
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto& r : res.command_results)
    out.emplace_back(r.command_id.to_string(), r.msg_id);
  return {res.batch_id.to_string(), out};
}

/// Sends a raw message to `queue`; returns its msg_id.
int64_t send_raw(db::connection& c, const std::string& queue,
                 const std::string& message) {
  return c.query("SELECT pgmq.send($1, $2::jsonb, 0)", queue, message)
    .int64(0, 0);
}

// -- calls under test --------------------------------------------------------

struct recv_row {
  int64_t msg_id = 0;
  int64_t read_ct = 0;
  std::string message;
  std::string outcome;
  opt_str command_id;
  opt_str command_type;
  opt_str status;
  opt_str attempts;
  opt_str max_attempts;
  opt_str correlation_id;
  opt_str reply_to;
  opt_str batch_id;
};

std::vector<recv_row> receive(db::connection& c, const std::string& domain,
                              const std::string& queue, int vt = 30,
                              int qty = 10) {
  auto res = c.query("SELECT msg_id, read_ct, message::text, outcome,"
                     " command_id, command_type, status, attempts,"
                     " max_attempts, correlation_id, reply_to, batch_id"
                     " FROM commandbus.cmdbus_receive($1, $2, $3::int, $4::int)",
                     domain, queue, vt, qty);
  std::vector<recv_row> out;
  for (int r = 0; r < res.rows(); ++r) {
    recv_row x;
    x.msg_id = res.int64(r, 0);
    x.read_ct = res.int64(r, 1);
    x.message = std::string{res.text(r, 2)};
    x.outcome = std::string{res.text(r, 3)};
    x.command_id = res.opt_text(r, 4);
    x.command_type = res.opt_text(r, 5);
    x.status = res.opt_text(r, 6);
    x.attempts = res.opt_text(r, 7);
    x.max_attempts = res.opt_text(r, 8);
    x.correlation_id = res.opt_text(r, 9);
    x.reply_to = res.opt_text(r, 10);
    x.batch_id = res.opt_text(r, 11);
    out.push_back(std::move(x));
  }
  return out;
}

using completions = std::vector<std::pair<std::string, bool>>;

completions read_completions(const db::result& res) {
  completions out;
  for (int r = 0; r < res.rows(); ++r)
    out.emplace_back(std::string{res.text(r, 0)}, res.boolean(r, 1));
  return out;
}

struct done_item {
  done_item(int64_t msg_id_, std::string command_id_, bool has_result_ = false,
            opt_str reply_to_ = std::nullopt, opt_str reply_ = std::nullopt)
    : msg_id(msg_id_),
      command_id(std::move(command_id_)),
      has_result(has_result_),
      reply_to(std::move(reply_to_)),
      reply(std::move(reply_)) {
    // nop
  }
  int64_t msg_id;
  std::string command_id;
  bool has_result;
  opt_str reply_to;
  opt_str reply;
};

completions complete(db::connection& c, const std::string& domain,
                     const std::string& queue,
                     const std::vector<done_item>& items) {
  std::vector<int64_t> msg_ids;
  std::vector<std::string> ids, has_result;
  std::vector<opt_str> reply_tos, replies;
  for (auto& x : items) {
    msg_ids.push_back(x.msg_id);
    ids.push_back(x.command_id);
    has_result.push_back(x.has_result ? "t" : "f");
    reply_tos.push_back(x.reply_to);
    replies.push_back(x.reply);
  }
  return read_completions(c.query(
    "SELECT batch_id, batch_complete FROM commandbus.cmdbus_complete("
    "$1, $2, $3::bigint[], $4::uuid[], $5::boolean[], $6::text[],"
    " $7::jsonb[])",
    domain, queue, db::array_literal(msg_ids), db::array_literal(ids),
    db::array_literal(has_result), db::array_literal(reply_tos),
    db::array_literal(replies)));
}

struct fail_item {
  fail_item() = default;
  fail_item(int64_t msg_id_, std::string command_id_)
    : msg_id(msg_id_), command_id(std::move(command_id_)) {
    // nop
  }
  int64_t msg_id = 0;
  std::string command_id;
  int attempt = 1;
  int max_attempts = 3;
  opt_str error_type;
  opt_str error_code = std::string{"E_CODE"};
  opt_str error_msg = std::string{"something broke"};
  opt_str error_details;
  opt_str reply_to;
  opt_str reply;
};

completions fail_final(db::connection& c, const std::string& domain,
                       const std::string& queue, const opt_str& kind,
                       const std::vector<fail_item>& items) {
  std::vector<int64_t> msg_ids, attempts, max_attempts;
  std::vector<std::string> ids;
  std::vector<opt_str> types, codes, msgs, details, reply_tos, replies;
  for (auto& x : items) {
    msg_ids.push_back(x.msg_id);
    ids.push_back(x.command_id);
    attempts.push_back(x.attempt);
    max_attempts.push_back(x.max_attempts);
    types.push_back(x.error_type);
    codes.push_back(x.error_code);
    msgs.push_back(x.error_msg);
    details.push_back(x.error_details);
    reply_tos.push_back(x.reply_to);
    replies.push_back(x.reply);
  }
  return read_completions(c.query(
    "SELECT batch_id, batch_complete FROM commandbus.cmdbus_fail_final("
    "$1, $2, $3, $4::bigint[], $5::uuid[], $6::int[], $7::int[], $8::text[],"
    " $9::text[], $10::text[], $11::jsonb[], $12::text[], $13::jsonb[])",
    domain, queue, kind, db::array_literal(msg_ids), db::array_literal(ids),
    db::array_literal(attempts), db::array_literal(max_attempts),
    db::array_literal(types), db::array_literal(codes),
    db::array_literal(msgs), db::array_literal(details),
    db::array_literal(reply_tos), db::array_literal(replies)));
}

struct transient_item {
  int64_t msg_id = 0;
  std::string command_id;
  int attempt = 1;
  int max_attempts = 3;
  std::string error_code = "TIMEOUT";
  std::string error_msg = "upstream timed out";
  int backoff = 10;
};

int64_t fail_transient(db::connection& c, const std::string& domain,
                       const std::string& queue,
                       const std::vector<transient_item>& items) {
  std::vector<int64_t> msg_ids, attempts, max_attempts, backoffs;
  std::vector<std::string> ids, codes, msgs;
  for (auto& x : items) {
    msg_ids.push_back(x.msg_id);
    ids.push_back(x.command_id);
    attempts.push_back(x.attempt);
    max_attempts.push_back(x.max_attempts);
    codes.push_back(x.error_code);
    msgs.push_back(x.error_msg);
    backoffs.push_back(x.backoff);
  }
  return c
    .query("SELECT commandbus.cmdbus_fail_transient($1, $2, $3::bigint[],"
           " $4::uuid[], $5::int[], $6::int[], $7::text[], $8::text[],"
           " $9::int[])",
           domain, queue, db::array_literal(msg_ids), db::array_literal(ids),
           db::array_literal(attempts), db::array_literal(max_attempts),
           db::array_literal(codes), db::array_literal(msgs),
           db::array_literal(backoffs))
    .int64(0, 0);
}

int64_t extend_visibility(db::connection& c, const std::string& queue,
                          const std::vector<int64_t>& msg_ids, int seconds) {
  return c
    .query("SELECT commandbus.cmdbus_extend_visibility($1, $2::bigint[],"
           " $3::int)",
           queue, db::array_literal(msg_ids), seconds)
    .int64(0, 0);
}

// -- state checks (SQL) ------------------------------------------------------

struct command_row {
  std::string status;
  int64_t attempts = 0;
  opt_str last_error_type;
  opt_str last_error_code;
  opt_str last_error_msg;
  std::string updated_at;
};

command_row read_command(db::connection& c, const std::string& domain,
                         const std::string& id) {
  auto res = c.query("SELECT status, attempts, last_error_type,"
                     " last_error_code, last_error_msg, updated_at::text"
                     " FROM commandbus.command"
                     " WHERE domain = $1 AND command_id = $2::uuid",
                     domain, id);
  if (res.rows() != 1)
    throw std::runtime_error("command row not found");
  command_row row;
  row.status = std::string{res.text(0, 0)};
  row.attempts = res.int64(0, 1);
  row.last_error_type = res.opt_text(0, 2);
  row.last_error_code = res.opt_text(0, 3);
  row.last_error_msg = res.opt_text(0, 4);
  row.updated_at = std::string{res.text(0, 5)};
  return row;
}

void set_status(db::connection& c, const std::string& domain,
                const std::string& id, const std::string& status) {
  c.query("UPDATE commandbus.command SET status = $3"
          " WHERE domain = $1 AND command_id = $2::uuid",
          domain, id, status);
}

using test::read_batch;

struct audit_row {
  std::string event_type;
  opt_str details;
};

/// The audit trail of `id` (command or batch) in `domain`, ordered by
/// (ts, audit_id).
std::vector<audit_row> audit_trail(db::connection& c, const std::string& domain,
                                   const std::string& id) {
  auto res = c.query("SELECT event_type, details_json::text"
                     " FROM commandbus.audit"
                     " WHERE domain = $1 AND command_id = $2::uuid"
                     " ORDER BY ts, audit_id",
                     domain, id);
  std::vector<audit_row> out;
  for (int r = 0; r < res.rows(); ++r)
    out.push_back({std::string{res.text(r, 0)}, res.opt_text(r, 1)});
  return out;
}

std::vector<std::string> audit_events(db::connection& c,
                                      const std::string& domain,
                                      const std::string& id) {
  std::vector<std::string> out;
  for (auto& row : audit_trail(c, domain, id))
    out.push_back(row.event_type);
  return out;
}

/// Details of the last audit row of `event_type` for `id`.
opt_str last_details(db::connection& c, const std::string& domain,
                     const std::string& id, const std::string& event_type) {
  opt_str out;
  for (auto& row : audit_trail(c, domain, id))
    if (row.event_type == event_type)
      out = row.details;
  return out;
}

int64_t count_events(db::connection& c, const std::string& domain,
                     const std::string& event_type) {
  return c
    .query("SELECT count(*) FROM commandbus.audit"
           " WHERE domain = $1 AND event_type = $2",
           domain, event_type)
    .int64(0, 0);
}

/// Compares two JSON documents as jsonb (key order and spacing ignored).
::testing::AssertionResult json_eq(db::connection& c, const opt_str& actual,
                                   const std::string& expected) {
  if (!actual)
    return ::testing::AssertionFailure() << "JSON is NULL, expected "
                                         << expected;
  if (c.query("SELECT $1::jsonb = $2::jsonb", *actual, expected).boolean(0, 0))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "JSON " << *actual
                                       << " != expected " << expected;
}

/// Whether the message is in the queue table / the archive table.
bool in_queue(db::connection& c, const std::string& queue, int64_t msg_id) {
  db::validate_queue_name(queue);
  return c.query("SELECT count(*) FROM pgmq.q_" + queue + " WHERE msg_id = $1",
                 msg_id)
           .int64(0, 0)
         == 1;
}

bool in_archive(db::connection& c, const std::string& queue, int64_t msg_id) {
  db::validate_queue_name(queue);
  return c.query("SELECT count(*) FROM pgmq.a_" + queue + " WHERE msg_id = $1",
                 msg_id)
           .int64(0, 0)
         == 1;
}

/// Messages of `queue` in msg_id order (the queue must exist).
std::vector<std::string> queue_messages(db::connection& c,
                                        const std::string& queue) {
  db::validate_queue_name(queue);
  auto res = c.exec("SELECT message::text FROM pgmq.q_" + queue
                    + " ORDER BY msg_id");
  std::vector<std::string> out;
  for (int r = 0; r < res.rows(); ++r)
    out.emplace_back(res.text(r, 0));
  return out;
}

bool queue_exists(db::connection& c, const std::string& queue) {
  return c.query("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1", queue)
           .int64(0, 0)
         > 0;
}

/// Collects notification channels until all of `want` arrived or 5 s passed.
std::set<std::string> collect_channels(db::connection& listener,
                                       const std::set<std::string>& want) {
  std::set<std::string> got;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!std::includes(got.begin(), got.end(), want.begin(), want.end())) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    for (auto& ch : listener.wait_for_notifications(left))
      got.insert(ch);
  }
  return got;
}

/// Runs `fn`, expecting a db::error with SQLSTATE 22023 whose message
/// contains `text`.
template <class F>
::testing::AssertionResult raises_invalid(F&& fn, const std::string& text) {
  try {
    fn();
  } catch (const db::error& e) {
    if (e.sqlstate() != "22023")
      return ::testing::AssertionFailure()
             << "SQLSTATE " << e.sqlstate() << ": " << e.what();
    if (std::string{e.what()}.find(text) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message '" << e.what() << "' lacks '" << text << "'";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no error raised";
}

const std::vector<std::string> terminal_statuses = {
  "COMPLETED", "CANCELED", "FAILED", "IN_TROUBLESHOOTING_QUEUE"};

} // namespace

// -- cmdbus_receive ----------------------------------------------------------

TEST(WorkerSqlReceive, EmptyQueueReturnsNoRows) {
  env e;
  EXPECT_TRUE(receive(e.conn, e.domain, e.queue).empty());
}

TEST(WorkerSqlReceive, ClaimsSentCommands) {
  env e;
  auto reply_queue = e.domain + "__replies";
  auto req1 = make_req(e.domain, reply_queue, 5);
  auto req2 = make_req(e.domain);
  auto s1 = e.bus.send(req1);
  auto s2 = e.bus.send(req2);

  auto rows = receive(e.conn, e.domain, e.queue, 30, 10);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].msg_id, s1.msg_id);
  EXPECT_EQ(rows[1].msg_id, s2.msg_id);
  for (auto& r : rows) {
    EXPECT_EQ(r.outcome, "OK");
    EXPECT_EQ(r.read_ct, 1);
    EXPECT_EQ(r.command_type, "DebitAccount");
    EXPECT_EQ(r.status, "IN_PROGRESS");
    EXPECT_EQ(r.attempts, "1");
    EXPECT_FALSE(r.batch_id);
  }
  EXPECT_EQ(rows[0].command_id, req1.command_id.to_string());
  EXPECT_EQ(rows[0].max_attempts, "5");
  EXPECT_EQ(rows[0].correlation_id, req1.correlation_id->to_string());
  EXPECT_EQ(rows[0].reply_to, reply_queue);
  EXPECT_TRUE(json_eq(e.conn, rows[0].message,
                      R"({"domain":")" + e.domain
                        + R"(","command_type":"DebitAccount","command_id":")"
                        + req1.command_id.to_string()
                        + R"(","correlation_id":")"
                        + req1.correlation_id->to_string()
                        + R"(","data":{"amount":100},"reply_to":")"
                        + reply_queue + R"("})"));
  EXPECT_EQ(rows[1].command_id, req2.command_id.to_string());
  EXPECT_EQ(rows[1].max_attempts, "3");
  EXPECT_FALSE(rows[1].reply_to) << "reply_to is NULL when reply_queue = ''";

  auto id1 = req1.command_id.to_string();
  auto cmd = read_command(e.conn, e.domain, id1);
  EXPECT_EQ(cmd.status, "IN_PROGRESS");
  EXPECT_EQ(cmd.attempts, 1);
  EXPECT_EQ(audit_events(e.conn, e.domain, id1),
            (std::vector<std::string>{"SENT", "RECEIVED"}));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id1, "RECEIVED"),
                      R"({"msg_id":)" + std::to_string(s1.msg_id)
                        + R"(,"attempt":1,"max_attempts":5})"));

  // Claimed messages stay in the queue, invisible for the vt.
  EXPECT_TRUE(in_queue(e.conn, e.queue, s1.msg_id));
  EXPECT_TRUE(e.conn
                .query("SELECT bool_and(vt > now() + interval '29 seconds')"
                       " FROM pgmq.q_"
                         + e.queue)
                .boolean(0, 0));
  EXPECT_TRUE(receive(e.conn, e.domain, e.queue).empty());
}

TEST(WorkerSqlReceive, HonoursQuantity) {
  env e;
  for (int i = 0; i < 5; ++i)
    send(e);
  EXPECT_EQ(receive(e.conn, e.domain, e.queue, 30, 2).size(), 2u);
  EXPECT_EQ(receive(e.conn, e.domain, e.queue, 30, 2).size(), 2u);
  EXPECT_EQ(receive(e.conn, e.domain, e.queue, 30, 2).size(), 1u);
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), 5);
}

TEST(WorkerSqlReceive, MalformedMessagesAreArchivedAsInvalid) {
  env e;
  std::vector<std::string> bad = {
    R"([1])",
    R"("just a string")",
    R"({})",
    R"({"command_type":"X"})",
    R"({"command_id":123})",
    R"({"command_id":null})",
    R"({"command_id":"not-a-uuid"})",
    R"({"command_id":"1234567-1234-1234-1234-123456789012"})",
    R"({"command_id":"{12345678-1234-1234-1234-123456789012"})",
  };
  std::vector<int64_t> ids;
  for (auto& m : bad)
    ids.push_back(send_raw(e.conn, e.queue, m));

  auto rows = receive(e.conn, e.domain, e.queue, 30, 20);
  ASSERT_EQ(rows.size(), bad.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(bad[i]);
    EXPECT_EQ(rows[i].msg_id, ids[i]);
    EXPECT_EQ(rows[i].outcome, "INVALID");
    EXPECT_TRUE(json_eq(e.conn, rows[i].message, bad[i]));
    EXPECT_FALSE(rows[i].command_id);
    EXPECT_FALSE(rows[i].status);
    EXPECT_FALSE(in_queue(e.conn, e.queue, ids[i]));
    EXPECT_TRUE(in_archive(e.conn, e.queue, ids[i]));
  }
  EXPECT_EQ(e.conn
              .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1",
                     e.domain)
              .int64(0, 0),
            0);
}

TEST(WorkerSqlReceive, AcceptsEveryUuidSpellingOfPostgres) {
  env e;
  // Claim the bus's own messages first, then re-deliver each command with a
  // differently spelled command_id.
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(send(e).first);
  ASSERT_EQ(receive(e.conn, e.domain, e.queue).size(), 3u);

  auto upper = ids[0];
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char ch) { return std::toupper(ch); });
  auto braces = "{" + ids[1] + "}";
  auto bare = ids[2];
  bare.erase(std::remove(bare.begin(), bare.end(), '-'), bare.end());
  for (auto& spelled : {upper, braces, bare})
    send_raw(e.conn, e.queue, R"({"command_id":")" + spelled + R"("})");

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i].outcome, "OK");
    EXPECT_EQ(rows[i].command_id, ids[i]);
    EXPECT_EQ(rows[i].attempts, "2");
  }
}

TEST(WorkerSqlReceive, UnknownCommandIsSkipped) {
  env e;
  // One id nobody sent, one sent in another domain.
  auto unknown = test::new_uuid();
  env other;
  auto foreign = send(other).first;
  auto m1 = send_raw(e.conn, e.queue, R"({"command_id":")" + unknown + R"("})");
  auto m2 = send_raw(e.conn, e.queue, R"({"command_id":")" + foreign + R"("})");

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 2u);
  for (auto& r : rows) {
    EXPECT_EQ(r.outcome, "SKIPPED");
    EXPECT_FALSE(r.status);
    EXPECT_FALSE(r.attempts);
  }
  EXPECT_EQ(rows[0].command_id, unknown);
  EXPECT_EQ(rows[1].command_id, foreign);
  EXPECT_TRUE(in_archive(e.conn, e.queue, m1));
  EXPECT_TRUE(in_archive(e.conn, e.queue, m2));
  EXPECT_FALSE(in_queue(e.conn, e.queue, m1));

  auto trail = audit_trail(e.conn, e.domain, unknown);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "RECEIVE_SKIPPED");
  EXPECT_TRUE(json_eq(e.conn, trail[0].details,
                      R"({"msg_id":)" + std::to_string(m1)
                        + R"(,"reason":"UNKNOWN_COMMAND","status":null})"));
  EXPECT_TRUE(json_eq(e.conn,
                      last_details(e.conn, e.domain, foreign, "RECEIVE_SKIPPED"),
                      R"({"msg_id":)" + std::to_string(m2)
                        + R"(,"reason":"UNKNOWN_COMMAND","status":null})"));
  // The other domain's command is untouched.
  EXPECT_EQ(read_command(other.conn, other.domain, foreign).attempts, 0);
}

TEST(WorkerSqlReceive, TerminalStatusesAreSkipped) {
  env e;
  for (auto& status : terminal_statuses) {
    SCOPED_TRACE(status);
    auto [id, msg_id] = send(e);
    set_status(e.conn, e.domain, id, status);

    auto rows = receive(e.conn, e.domain, e.queue);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].outcome, "SKIPPED");
    EXPECT_EQ(rows[0].command_id, id);
    EXPECT_EQ(rows[0].status, status);
    EXPECT_FALSE(rows[0].attempts);

    auto cmd = read_command(e.conn, e.domain, id);
    EXPECT_EQ(cmd.status, status);
    EXPECT_EQ(cmd.attempts, 0);
    EXPECT_FALSE(in_queue(e.conn, e.queue, msg_id));
    EXPECT_TRUE(in_archive(e.conn, e.queue, msg_id));
    EXPECT_EQ(audit_events(e.conn, e.domain, id),
              (std::vector<std::string>{"SENT", "RECEIVE_SKIPPED"}));
    EXPECT_TRUE(json_eq(
      e.conn, last_details(e.conn, e.domain, id, "RECEIVE_SKIPPED"),
      R"({"msg_id":)" + std::to_string(msg_id)
        + R"(,"reason":"TERMINAL_STATUS","status":")" + status + R"("})"));
  }
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), 0);
}

TEST(WorkerSqlReceive, DuplicateMessagesInOneReadClaimOnce) {
  env e;
  auto [id, first] = send(e);
  auto body = R"({"command_id":")" + id + R"("})";
  auto second = send_raw(e.conn, e.queue, body);
  auto third = send_raw(e.conn, e.queue, body);

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].msg_id, first);
  EXPECT_EQ(rows[0].outcome, "OK");
  EXPECT_EQ(rows[0].attempts, "1");
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(rows[i].outcome, "SKIPPED");
    EXPECT_EQ(rows[i].command_id, id);
    EXPECT_EQ(rows[i].status, "IN_PROGRESS");
  }
  EXPECT_EQ(read_command(e.conn, e.domain, id).attempts, 1);
  EXPECT_TRUE(in_queue(e.conn, e.queue, first));
  EXPECT_TRUE(in_archive(e.conn, e.queue, second));
  EXPECT_TRUE(in_archive(e.conn, e.queue, third));

  auto trail = audit_trail(e.conn, e.domain, id);
  ASSERT_EQ(trail.size(), 4u);
  EXPECT_EQ(trail[1].event_type, "RECEIVED");
  EXPECT_TRUE(json_eq(e.conn, trail[1].details,
                      R"({"msg_id":)" + std::to_string(first)
                        + R"(,"attempt":1,"max_attempts":3})"));
  EXPECT_EQ(trail[2].event_type, "RECEIVE_SKIPPED");
  EXPECT_TRUE(
    json_eq(e.conn, trail[2].details,
            R"({"msg_id":)" + std::to_string(second)
              + R"(,"reason":"DUPLICATE_MESSAGE","status":"IN_PROGRESS"})"));
  EXPECT_TRUE(
    json_eq(e.conn, trail[3].details,
            R"({"msg_id":)" + std::to_string(third)
              + R"(,"reason":"DUPLICATE_MESSAGE","status":"IN_PROGRESS"})"));
}

TEST(WorkerSqlReceive, DuplicateOfTerminalCommandIsSkippedForBoth) {
  env e;
  auto [id, first] = send(e);
  set_status(e.conn, e.domain, id, "COMPLETED");
  auto second = send_raw(e.conn, e.queue, R"({"command_id":")" + id + R"("})");

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].outcome, "SKIPPED");
  EXPECT_EQ(rows[1].outcome, "SKIPPED");
  EXPECT_TRUE(json_eq(
    e.conn, audit_trail(e.conn, e.domain, id).at(1).details,
    R"({"msg_id":)" + std::to_string(first)
      + R"(,"reason":"TERMINAL_STATUS","status":"COMPLETED"})"));
  EXPECT_TRUE(json_eq(
    e.conn, audit_trail(e.conn, e.domain, id).at(2).details,
    R"({"msg_id":)" + std::to_string(second)
      + R"(,"reason":"DUPLICATE_MESSAGE","status":"COMPLETED"})"));
  EXPECT_TRUE(in_archive(e.conn, e.queue, first));
  EXPECT_TRUE(in_archive(e.conn, e.queue, second));
}

TEST(WorkerSqlReceive, AttemptsCountAcrossRedelivery) {
  env e;
  auto [id, msg_id] = send(e, std::nullopt, 4);
  for (int attempt = 1; attempt <= 3; ++attempt) {
    SCOPED_TRACE(attempt);
    // vt 0: visible again at once.
    auto rows = receive(e.conn, e.domain, e.queue, 0, 10);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].msg_id, msg_id);
    EXPECT_EQ(rows[0].read_ct, attempt);
    EXPECT_EQ(rows[0].attempts, std::to_string(attempt));
    EXPECT_EQ(rows[0].max_attempts, "4");
    EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "RECEIVED"),
                        R"({"msg_id":)" + std::to_string(msg_id)
                          + R"(,"attempt":)" + std::to_string(attempt)
                          + R"(,"max_attempts":4})"));
  }
  EXPECT_EQ(read_command(e.conn, e.domain, id).attempts, 3);
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), 3);
}

TEST(WorkerSqlReceive, StartsBatchOnce) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 3);
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).status, "PENDING");

  auto rows = receive(e.conn, e.domain, e.queue, 30, 2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].batch_id, batch_id);
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_TRUE(b.started_at);
  auto started_at = e.conn
                      .query("SELECT started_at::text FROM commandbus.batch"
                             " WHERE domain = $1 AND batch_id = $2::uuid",
                             e.domain, batch_id)
                      .opt_text(0, 0);

  ASSERT_EQ(receive(e.conn, e.domain, e.queue, 30, 2).size(), 1u);
  auto trail = audit_trail(e.conn, e.domain, batch_id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "BATCH_STARTED");
  EXPECT_TRUE(json_eq(e.conn, trail[0].details,
                      R"({"batch_id":")" + batch_id + R"("})"));
  EXPECT_EQ(e.conn
              .query("SELECT started_at::text FROM commandbus.batch"
                     " WHERE domain = $1 AND batch_id = $2::uuid",
                     e.domain, batch_id)
              .opt_text(0, 0),
            started_at);
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), 3);
}

// -- cmdbus_complete ---------------------------------------------------------

TEST(WorkerSqlComplete, CompletesWithoutReply) {
  env e;
  auto [id, msg_id] = send(e);
  receive(e.conn, e.domain, e.queue);

  auto done = complete(e.conn, e.domain, e.queue, {{msg_id, id, true}});
  EXPECT_TRUE(done.empty()) << "no batch";

  EXPECT_EQ(read_command(e.conn, e.domain, id).status, "COMPLETED");
  EXPECT_FALSE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_FALSE(in_archive(e.conn, e.queue, msg_id)) << "deleted, not archived";
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "COMPLETED"}));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "COMPLETED"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"reply_to":null,"has_result":true})"));
}

TEST(WorkerSqlComplete, SendsRepliesAndNotifies) {
  env e;
  // Two reply queues; neither exists before the completion.
  auto replies_a = e.domain + "__replies";
  auto replies_b = e.domain + "__other";
  ASSERT_FALSE(queue_exists(e.conn, replies_a));
  ASSERT_FALSE(queue_exists(e.conn, replies_b));
  auto c1 = send(e);
  auto c2 = send(e);
  auto c3 = send(e);
  receive(e.conn, e.domain, e.queue);

  auto listener = test::connect();
  listener.listen(db::notify_channel(replies_a));
  listener.listen(db::notify_channel(replies_b));

  auto reply = [](const std::string& id, const std::string& result) {
    return R"({"command_id":")" + id
           + R"(","correlation_id":null,"outcome":"SUCCESS","result":)"
           + result + "}";
  };
  auto r1 = reply(c1.first, R"({"n":1})");
  auto r2 = reply(c2.first, "null");
  auto r3 = reply(c3.first, R"({"n":3})");
  complete(e.conn, e.domain, e.queue,
           {{c1.second, c1.first, true, replies_a, r1},
            {c2.second, c2.first, false, replies_b, r2},
            {c3.second, c3.first, true, replies_a, r3}});

  auto a = queue_messages(e.conn, replies_a);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(json_eq(e.conn, a[0], r1));
  EXPECT_TRUE(json_eq(e.conn, a[1], r3));
  auto b = queue_messages(e.conn, replies_b);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_TRUE(json_eq(e.conn, b[0], r2));

  std::set<std::string> want = {db::notify_channel(replies_a),
                                db::notify_channel(replies_b)};
  EXPECT_EQ(collect_channels(listener, want), want);

  EXPECT_TRUE(json_eq(e.conn,
                      last_details(e.conn, e.domain, c2.first, "COMPLETED"),
                      R"({"msg_id":)" + std::to_string(c2.second)
                        + R"(,"reply_to":")" + replies_b
                        + R"(","has_result":false})"));
  for (auto* c : {&c1, &c2, &c3})
    EXPECT_EQ(read_command(e.conn, e.domain, c->first).status, "COMPLETED");
}

TEST(WorkerSqlComplete, ReCompleteIsIdempotent) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);
  auto [id, msg_id] = cmds[0];

  auto first = complete(e.conn, e.domain, e.queue, {{msg_id, id}});
  EXPECT_EQ(first, (completions{{batch_id, false}}));
  auto updated_at = read_command(e.conn, e.domain, id).updated_at;

  auto again = complete(e.conn, e.domain, e.queue, {{msg_id, id}});
  EXPECT_TRUE(again.empty()) << "no transition, no counter change";
  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "COMPLETED");
  EXPECT_EQ(cmd.updated_at, updated_at);
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "COMPLETED",
                                      "COMPLETED"}));
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS");

  // The same command twice in one call counts once too; a completed one in
  // the same call stays untouched.
  auto [id2, msg2] = cmds[1];
  auto both = complete(e.conn, e.domain, e.queue,
                       {{msg2, id2}, {msg_id, id}, {msg2, id2}});
  EXPECT_EQ(both, (completions{{batch_id, true}}));
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).completed, 2);
  EXPECT_EQ(read_command(e.conn, e.domain, id).updated_at, updated_at);
  EXPECT_EQ(count_events(e.conn, e.domain, "BATCH_COMPLETED"), 1);
  EXPECT_EQ(audit_events(e.conn, e.domain, id2),
            (std::vector<std::string>{"SENT", "RECEIVED", "COMPLETED",
                                      "COMPLETED"}));
}

TEST(WorkerSqlComplete, LateSuccessFromTroubleshootingQueue) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);
  auto [a, ma] = cmds[0];
  auto [b, mb] = cmds[1];

  fail_final(e.conn, e.domain, e.queue, "PERMANENT", {{ma, a}});
  auto batch = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(batch.in_tsq, 1);

  // A late success of the same command (redelivery race): tsq_complete.
  auto done = complete(e.conn, e.domain, e.queue, {{ma, a}});
  EXPECT_EQ(done, (completions{{batch_id, false}}));
  auto cmd = read_command(e.conn, e.domain, a);
  EXPECT_EQ(cmd.status, "COMPLETED");
  EXPECT_EQ(cmd.last_error_type, "PERMANENT") << "COALESCE(new, old)";
  batch = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(batch.in_tsq, 0);
  EXPECT_EQ(batch.completed, 1);

  done = complete(e.conn, e.domain, e.queue, {{mb, b}});
  EXPECT_EQ(done, (completions{{batch_id, true}}));
  batch = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(batch.status, "COMPLETED");
  EXPECT_EQ(batch.completed, 2);
  EXPECT_EQ(batch.in_tsq, 0);
}

TEST(WorkerSqlComplete, CompletesBatchExactlyOnceAcrossCalls) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);

  EXPECT_EQ(complete(e.conn, e.domain, e.queue, {{cmds[0].second, cmds[0].first}}),
            (completions{{batch_id, false}}));
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_FALSE(b.completed_at);

  EXPECT_EQ(complete(e.conn, e.domain, e.queue, {{cmds[1].second, cmds[1].first}}),
            (completions{{batch_id, true}}));
  b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_TRUE(b.completed_at);
  EXPECT_EQ(b.completed, 2);

  // Redelivered completions change nothing and never complete it again.
  EXPECT_TRUE(complete(e.conn, e.domain, e.queue,
                       {{cmds[0].second, cmds[0].first},
                        {cmds[1].second, cmds[1].first}})
                .empty());
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).completed, 2);

  auto trail = audit_trail(e.conn, e.domain, batch_id);
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_EQ(trail[0].event_type, "BATCH_STARTED");
  EXPECT_EQ(trail[1].event_type, "BATCH_COMPLETED");
  EXPECT_TRUE(json_eq(e.conn, trail[1].details,
                      R"({"batch_id":")" + batch_id
                        + R"(","total_count":2,"completed_count":2,)"
                          R"("canceled_count":0,"failed_count":0})"));
}

TEST(WorkerSqlComplete, AggregatesOneBatchUpdatePerCall) {
  env e;
  auto [batch1, cmds1] = make_batch(e, 3);
  auto [batch2, cmds2] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);

  std::vector<done_item> items;
  for (auto& c : cmds1)
    items.push_back({c.second, c.first});
  items.push_back({cmds2[0].second, cmds2[0].first});
  auto done = complete(e.conn, e.domain, e.queue, items);
  completions expected = {{batch1, true}, {batch2, false}};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(done, expected);

  auto b1 = read_batch(e.conn, e.domain, batch1);
  EXPECT_EQ(b1.status, "COMPLETED");
  EXPECT_EQ(b1.completed, 3);
  auto b2 = read_batch(e.conn, e.domain, batch2);
  EXPECT_EQ(b2.status, "IN_PROGRESS");
  EXPECT_EQ(b2.completed, 1);
  EXPECT_EQ(count_events(e.conn, e.domain, "BATCH_COMPLETED"), 1);
  EXPECT_EQ(count_events(e.conn, e.domain, "COMPLETED"), 4);
}

TEST(WorkerSqlComplete, FailedCommandCompletesBatchWithFailures) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);

  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "BUSINESS_RULE",
                       {{cmds[0].second, cmds[0].first}}),
            (completions{{batch_id, false}}));
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).failed, 1);
  EXPECT_EQ(complete(e.conn, e.domain, e.queue, {{cmds[1].second, cmds[1].first}}),
            (completions{{batch_id, true}}));

  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_TRUE(b.completed_at);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.failed, 1);
  EXPECT_TRUE(json_eq(e.conn,
                      last_details(e.conn, e.domain, batch_id, "BATCH_COMPLETED"),
                      R"({"batch_id":")" + batch_id
                        + R"(","total_count":2,"completed_count":1,)"
                          R"("canceled_count":0,"failed_count":1})"));
}

TEST(WorkerSqlComplete, UnknownCommandIsAuditedOnly) {
  env e;
  auto unknown = test::new_uuid();
  auto msg_id = send_raw(e.conn, e.queue, R"({"command_id":")" + unknown + R"("})");
  EXPECT_TRUE(complete(e.conn, e.domain, e.queue, {{msg_id, unknown}}).empty());
  EXPECT_FALSE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, unknown),
            (std::vector<std::string>{"COMPLETED"}));
  EXPECT_EQ(e.conn
              .query("SELECT count(*) FROM commandbus.command WHERE domain = $1",
                     e.domain)
              .int64(0, 0),
            0);
}

// -- cmdbus_fail_final -------------------------------------------------------

TEST(WorkerSqlFailFinal, PermanentMovesToTroubleshootingQueue) {
  env e;
  auto reply_queue = e.domain + "__replies";
  auto [batch_id, cmds] = make_batch(e, 2);
  auto [id, msg_id] = send(e, reply_queue);
  receive(e.conn, e.domain, e.queue);

  fail_item f;
  f.msg_id = msg_id;
  f.command_id = id;
  f.attempt = 1;
  f.error_code = "BAD_INPUT";
  f.error_msg = "amount must be positive";
  f.error_details = R"({"field":"amount"})";
  f.reply_to = reply_queue;
  f.reply = R"({"outcome":"FAILED"})";
  fail_item g;
  g.msg_id = cmds[0].second;
  g.command_id = cmds[0].first;
  g.attempt = 2;
  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "PERMANENT", {f, g}),
            (completions{{batch_id, false}}));

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "IN_TROUBLESHOOTING_QUEUE");
  EXPECT_EQ(cmd.last_error_type, "PERMANENT");
  EXPECT_EQ(cmd.last_error_code, "BAD_INPUT");
  EXPECT_EQ(cmd.last_error_msg, "amount must be positive");
  EXPECT_FALSE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_TRUE(in_archive(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "MOVED_TO_TSQ"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"attempt":1,"error_code":"BAD_INPUT",)"
                          R"("error_msg":"amount must be positive",)"
                          R"("error_details":{"field":"amount"}})"));
  // NULL error_details is recorded as {} (the reference's default).
  EXPECT_TRUE(json_eq(
    e.conn, last_details(e.conn, e.domain, cmds[0].first, "MOVED_TO_TSQ"),
    R"({"msg_id":)" + std::to_string(cmds[0].second)
      + R"(,"attempt":2,"error_code":"E_CODE",)"
        R"("error_msg":"something broke","error_details":{}})"));
  EXPECT_TRUE(queue_messages(e.conn, reply_queue).empty()) << "no reply to the TSQ";

  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS");
}

TEST(WorkerSqlFailFinal, ExhaustedMovesToTroubleshootingQueue) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 1);
  auto [id, msg_id] = send(e, e.domain + "__replies", 3);
  receive(e.conn, e.domain, e.queue);

  fail_item f;
  f.msg_id = msg_id;
  f.command_id = id;
  f.attempt = 3;
  f.max_attempts = 3;
  f.error_type = "TRANSIENT";
  f.error_code = "TIMEOUT";
  f.error_msg = "upstream timed out";
  f.reply_to = e.domain + "__replies";
  f.reply = R"({"outcome":"FAILED"})";
  fail_item g;
  g.msg_id = cmds[0].second;
  g.command_id = cmds[0].first;
  g.attempt = 3;
  g.max_attempts = 3;  // error_type NULL: TRANSIENT
  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "EXHAUSTED", {f, g}),
            (completions{{batch_id, false}}));

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "IN_TROUBLESHOOTING_QUEUE");
  EXPECT_EQ(cmd.last_error_type, "TRANSIENT");
  EXPECT_EQ(cmd.last_error_code, "TIMEOUT");
  EXPECT_EQ(cmd.last_error_msg, "upstream timed out");
  EXPECT_TRUE(in_archive(e.conn, e.queue, msg_id));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "MOVED_TO_TSQ"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"attempt":3,"max_attempts":3,)"
                          R"("reason":"EXHAUSTED","error_type":"TRANSIENT",)"
                          R"("error_code":"TIMEOUT",)"
                          R"("error_msg":"upstream timed out"})"));
  EXPECT_TRUE(json_eq(
    e.conn, last_details(e.conn, e.domain, cmds[0].first, "MOVED_TO_TSQ"),
    R"({"msg_id":)" + std::to_string(cmds[0].second)
      + R"(,"attempt":3,"max_attempts":3,"reason":"EXHAUSTED",)"
        R"("error_type":"TRANSIENT","error_code":"E_CODE",)"
        R"("error_msg":"something broke"})"));
  EXPECT_EQ(read_command(e.conn, e.domain, cmds[0].first).last_error_type,
            "TRANSIENT");
  EXPECT_TRUE(queue_messages(e.conn, e.domain + "__replies").empty());
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS") << "TSQ items keep a batch open";
}

TEST(WorkerSqlFailFinal, BusinessRuleFailsAndReplies) {
  env e;
  auto reply_queue = e.domain + "__replies";
  auto [batch_id, cmds] = make_batch(e, 1);
  auto [id, msg_id] = send(e, reply_queue);
  receive(e.conn, e.domain, e.queue);

  auto listener = test::connect();
  listener.listen(db::notify_channel(reply_queue));

  auto reply = R"({"command_id":")" + id
               + R"(","correlation_id":null,"outcome":"FAILED",)"
                 R"("result":{"error_code":"CLOSED","error_message":"account closed",)"
                 R"("error_details":{}},"error_code":"CLOSED",)"
                 R"("error_message":"account closed"})";
  fail_item f;
  f.msg_id = msg_id;
  f.command_id = id;
  f.error_type = "PERMANENT";  // ignored for BUSINESS_RULE
  f.error_code = "CLOSED";
  f.error_msg = "account closed";
  f.error_details = "{}";
  f.reply_to = reply_queue;
  f.reply = reply;
  fail_item g;
  g.msg_id = cmds[0].second;
  g.command_id = cmds[0].first;
  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "BUSINESS_RULE", {f, g}),
            (completions{{batch_id, true}}));

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "FAILED");
  EXPECT_EQ(cmd.last_error_type, "BUSINESS_RULE");
  EXPECT_EQ(cmd.last_error_code, "CLOSED");
  EXPECT_EQ(cmd.last_error_msg, "account closed");
  EXPECT_TRUE(in_archive(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED",
                                      "BUSINESS_RULE_FAILED"}));
  EXPECT_TRUE(json_eq(e.conn,
                      last_details(e.conn, e.domain, id, "BUSINESS_RULE_FAILED"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"attempt":1,"error_code":"CLOSED",)"
                          R"("error_msg":"account closed","error_details":{}})"));

  auto replies = queue_messages(e.conn, reply_queue);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_TRUE(json_eq(e.conn, replies[0], reply));
  std::set<std::string> want = {db::notify_channel(reply_queue)};
  EXPECT_EQ(collect_channels(listener, want), want);

  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_EQ(b.failed, 1);
  EXPECT_EQ(count_events(e.conn, e.domain, "BATCH_COMPLETED"), 1);
}

TEST(WorkerSqlFailFinal, UnknownKindRaises) {
  env e;
  auto sent = send(e);
  auto id = sent.first;
  auto msg_id = sent.second;
  receive(e.conn, e.domain, e.queue);
  for (const opt_str& kind : {opt_str{"TRANSIENT"}, opt_str{"permanent"},
                              opt_str{std::nullopt}}) {
    EXPECT_TRUE(raises_invalid(
      [&] { fail_final(e.conn, e.domain, e.queue, kind, {{msg_id, id}}); },
      "unknown kind"));
  }
  EXPECT_EQ(read_command(e.conn, e.domain, id).status, "IN_PROGRESS");
  EXPECT_TRUE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED"}));
}

TEST(WorkerSqlFailFinal, RepeatedFinalFailureCountsOnce) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);
  auto [id, msg_id] = cmds[0];

  fail_item f;
  f.msg_id = msg_id;
  f.command_id = id;
  f.error_code = "FIRST";
  fail_final(e.conn, e.domain, e.queue, "PERMANENT", {f});
  auto updated_at = read_command(e.conn, e.domain, id).updated_at;
  EXPECT_TRUE(fail_final(e.conn, e.domain, e.queue, "PERMANENT", {f}).empty());

  // Again, together with a command that really moves.
  f.error_code = "SECOND";
  fail_item g{cmds[1].second, cmds[1].first};
  g.error_code = "OTHER";
  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "PERMANENT", {f, g}),
            (completions{{batch_id, false}}));

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "IN_TROUBLESHOOTING_QUEUE");
  EXPECT_EQ(cmd.last_error_code, "FIRST") << "no transition, audit only";
  EXPECT_EQ(cmd.updated_at, updated_at);
  EXPECT_EQ(read_command(e.conn, e.domain, cmds[1].first).last_error_code,
            "OTHER");
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "MOVED_TO_TSQ",
                                      "MOVED_TO_TSQ", "MOVED_TO_TSQ"}));
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).in_tsq, 2);

  // A business-rule failure of a command already in the TSQ changes its
  // status but counts nothing (only IN_PROGRESS -> FAILED counts).
  EXPECT_TRUE(fail_final(e.conn, e.domain, e.queue, "BUSINESS_RULE", {f}).empty());
  EXPECT_EQ(read_command(e.conn, e.domain, id).status, "FAILED");
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.in_tsq, 2);
  EXPECT_EQ(b.failed, 0);
}

// -- cmdbus_fail_transient ---------------------------------------------------

TEST(WorkerSqlFailTransient, RecordsErrorAndDelaysRedelivery) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 1);
  auto [id, msg_id] = send(e);
  receive(e.conn, e.domain, e.queue);

  transient_item t;
  t.msg_id = msg_id;
  t.command_id = id;
  t.attempt = 1;
  t.max_attempts = 3;
  t.backoff = 60;
  transient_item u;
  u.msg_id = cmds[0].second;
  u.command_id = cmds[0].first;
  u.backoff = 10;
  EXPECT_EQ(fail_transient(e.conn, e.domain, e.queue, {t, u}), 2);

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "IN_PROGRESS") << "status unchanged";
  EXPECT_EQ(cmd.attempts, 1);
  EXPECT_EQ(cmd.last_error_type, "TRANSIENT");
  EXPECT_EQ(cmd.last_error_code, "TIMEOUT");
  EXPECT_EQ(cmd.last_error_msg, "upstream timed out");
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "FAILED"}));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "FAILED"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"attempt":1,"max_attempts":3,)"
                          R"("error_type":"TRANSIENT","error_code":"TIMEOUT",)"
                          R"("error_msg":"upstream timed out"})"));

  // Still in the queue, invisible until the backoff passed.
  EXPECT_TRUE(in_queue(e.conn, e.queue, msg_id));
  auto vt_after = [&](int64_t m, int secs) {
    return e.conn
      .query("SELECT vt > now() + make_interval(secs => $2::int)"
             " - interval '1 second' FROM pgmq.q_"
               + e.queue + " WHERE msg_id = $1",
             m, secs)
      .boolean(0, 0);
  };
  EXPECT_TRUE(vt_after(msg_id, 60));
  EXPECT_TRUE(vt_after(cmds[0].second, 10));
  EXPECT_FALSE(vt_after(cmds[0].second, 12));
  EXPECT_TRUE(receive(e.conn, e.domain, e.queue, 30, 10).empty());

  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_EQ(b.completed + b.failed + b.in_tsq, 0);
}

TEST(WorkerSqlFailTransient, ZeroBackoffRedeliversAtOnce) {
  env e;
  auto [id, msg_id] = send(e);
  receive(e.conn, e.domain, e.queue);
  transient_item t;
  t.msg_id = msg_id;
  t.command_id = id;
  t.backoff = 0;
  EXPECT_EQ(fail_transient(e.conn, e.domain, e.queue, {t}), 1);

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].outcome, "OK");
  EXPECT_EQ(rows[0].attempts, "2");
  EXPECT_EQ(rows[0].read_ct, 2);
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "FAILED",
                                      "RECEIVED"}));
}

TEST(WorkerSqlFailTransient, UnknownCommandIsNotAudited) {
  env e;
  auto unknown = test::new_uuid();
  auto msg_id = send_raw(e.conn, e.queue, R"({"command_id":")" + unknown + R"("})");
  transient_item t;
  t.msg_id = msg_id;
  t.command_id = unknown;
  EXPECT_EQ(fail_transient(e.conn, e.domain, e.queue, {t}), 0);
  EXPECT_TRUE(audit_trail(e.conn, e.domain, unknown).empty());
}

// -- cmdbus_extend_visibility ------------------------------------------------

TEST(WorkerSqlExtendVisibility, ExtendsLease) {
  env e;
  auto [id1, m1] = send(e);
  auto [id2, m2] = send(e);
  receive(e.conn, e.domain, e.queue, 5, 10);

  EXPECT_EQ(extend_visibility(e.conn, e.queue, {m1, m2, 999999999}, 120), 2);
  EXPECT_TRUE(e.conn
                .query("SELECT bool_and(vt > now() + interval '119 seconds')"
                       " FROM pgmq.q_"
                         + e.queue)
                .boolean(0, 0));
  EXPECT_EQ(extend_visibility(e.conn, e.queue, {}, 120), 0);

  // Shortening works too: 0 makes the message visible again.
  EXPECT_EQ(extend_visibility(e.conn, e.queue, {m1}, 0), 1);
  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].msg_id, m1);
}

// -- argument checks ---------------------------------------------------------

TEST(WorkerSqlArguments, ArrayLengthMismatchRaises) {
  env e;
  auto sent = send(e);
  auto id = sent.first;
  auto msg_id = sent.second;
  receive(e.conn, e.domain, e.queue);
  auto one_id = db::array_literal(std::vector<std::string>{id});
  auto two_msgs = db::array_literal(std::vector<int64_t>{msg_id, msg_id});

  EXPECT_TRUE(raises_invalid(
    [&] {
      e.conn.query("SELECT * FROM commandbus.cmdbus_complete($1, $2,"
                   " $3::bigint[], $4::uuid[], '{t,t}', NULL, NULL)",
                   e.domain, e.queue, two_msgs, one_id);
    },
    "equal lengths"));
  EXPECT_TRUE(raises_invalid(
    [&] {
      e.conn.query("SELECT * FROM commandbus.cmdbus_complete($1, $2,"
                   " $3::bigint[], $4::uuid[], '{t}', '{a,b}', NULL)",
                   e.domain, e.queue,
                   db::array_literal(std::vector<int64_t>{msg_id}), one_id);
    },
    "p_reply_tos"));
  EXPECT_TRUE(raises_invalid(
    [&] {
      e.conn.query("SELECT * FROM commandbus.cmdbus_fail_final($1, $2,"
                   " 'PERMANENT', $3::bigint[], $4::uuid[], '{1}', '{3}',"
                   " NULL, '{a}', '{b}', NULL, NULL, NULL)",
                   e.domain, e.queue, two_msgs,
                   db::array_literal(std::vector<std::string>{id, id}));
    },
    "p_attempts"));
  EXPECT_TRUE(raises_invalid(
    [&] {
      e.conn.query("SELECT commandbus.cmdbus_fail_transient($1, $2,"
                   " $3::bigint[], $4::uuid[], '{1,1}', '{3,3}', '{a,a}',"
                   " '{b,b}', '{10}')",
                   e.domain, e.queue, two_msgs,
                   db::array_literal(std::vector<std::string>{id, id}));
    },
    "p_backoff_seconds"));
  EXPECT_TRUE(raises_invalid(
    [&] {
      e.conn.query("SELECT commandbus.cmdbus_fail_transient($1, $2,"
                   " $3::bigint[], NULL, NULL, NULL, NULL, NULL, NULL)",
                   e.domain, e.queue, two_msgs);
    },
    "p_command_ids"));

  // Nothing happened.
  EXPECT_EQ(read_command(e.conn, e.domain, id).status, "IN_PROGRESS");
  EXPECT_TRUE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED"}));
}

TEST(WorkerSqlArguments, InvalidReplyQueueRaises) {
  env e;
  auto sent = send(e);
  auto id = sent.first;
  auto msg_id = sent.second;
  receive(e.conn, e.domain, e.queue);
  EXPECT_TRUE(raises_invalid(
    [&] {
      complete(e.conn, e.domain, e.queue,
               {{msg_id, id, false, std::string{"bad-queue"}, std::string{"{}"}}});
    },
    "invalid reply queue"));
  EXPECT_TRUE(raises_invalid(
    [&] {
      complete(e.conn, e.domain, e.queue,
               {{msg_id, id, false, e.domain + "__replies", std::nullopt}});
    },
    "missing reply"));
  EXPECT_EQ(read_command(e.conn, e.domain, id).status, "IN_PROGRESS");
  EXPECT_TRUE(in_queue(e.conn, e.queue, msg_id));
}

TEST(WorkerSqlArguments, EmptyArraysAreNoOps) {
  env e;
  EXPECT_TRUE(complete(e.conn, e.domain, e.queue, {}).empty());
  EXPECT_TRUE(fail_final(e.conn, e.domain, e.queue, "PERMANENT", {}).empty());
  EXPECT_EQ(fail_transient(e.conn, e.domain, e.queue, {}), 0);
  EXPECT_EQ(e.conn
              .query("SELECT count(*) FROM commandbus.cmdbus_complete($1, $2,"
                     " NULL, NULL, NULL, NULL, NULL)",
                     e.domain, e.queue)
              .int64(0, 0),
            0);
  // Even for a queue that does not exist: nothing is touched.
  EXPECT_EQ(fail_transient(e.conn, e.domain, e.domain + "__nope", {}), 0);
  EXPECT_EQ(extend_visibility(e.conn, e.domain + "__nope", {}, 10), 0);
}

// -- concurrency -------------------------------------------------------------

TEST(WorkerSqlConcurrency, ParallelReceiversClaimEachCommandOnce) {
  env e;
  constexpr int n = 500;
  auto [batch_id, cmds] = make_batch(e, n);

  std::vector<std::vector<std::string>> claimed(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      try {
        auto conn = test::connect();
        for (;;) {
          auto rows = receive(conn, e.domain, e.queue, 300, 25);
          if (rows.empty())
            break;
          for (auto& r : rows) {
            if (r.outcome != "OK")
              throw std::runtime_error("unexpected outcome " + r.outcome);
            claimed[w].push_back(*r.command_id);
          }
        }
      } catch (const std::exception& ex) {
        errors[w] = ex.what();
      }
    });
  }
  for (auto& t : workers)
    t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");

  std::multiset<std::string> all(claimed[0].begin(), claimed[0].end());
  all.insert(claimed[1].begin(), claimed[1].end());
  std::set<std::string> unique(all.begin(), all.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(n)) << "no command claimed twice";
  std::set<std::string> expected;
  for (auto& c : cmds)
    expected.insert(c.first);
  EXPECT_EQ(unique, expected);

  EXPECT_EQ(e.conn
              .query("SELECT count(*) FROM commandbus.command WHERE domain = $1"
                     " AND status = 'IN_PROGRESS' AND attempts = 1",
                     e.domain)
              .int64(0, 0),
            n);
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), n);
  EXPECT_EQ(count_events(e.conn, e.domain, "BATCH_STARTED"), 1);
}
