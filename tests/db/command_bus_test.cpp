// Integration tests of the send side of the command bus (`cmdbus::command_bus`,
// sql/commandbus/V003__cmdbus_send.sql) against the real database: the
// reference's send-side scenarios (rcmd.md §1.3, §2.2, §2.4, §2.6, §4, §5.1:
// test_send_idempotency, test_correlation_id, test_query, test_audit and the
// create_batch/list parts of test_batch) and DECISIONS.md D8, D10, D11, D14.
//
// Every test works in its own domain(s), so tests never see each other's
// rows. State is checked with SQL on a separate connection, not only through
// the API under test.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "db/command_bus.hpp"
#include "db/connection.hpp"
#include "db/error.hpp"
#include "db/pool.hpp"
#include "db/queue_name.hpp"
#include "model/errors.hpp"
#include "model/json.hpp"
#include "model/types.hpp"
#include "model/uuid.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

using opt_str = std::optional<std::string>;

// -- setup -------------------------------------------------------------------

db::pool_options pool_options(size_t max_size,
                              std::chrono::milliseconds acquire_timeout = 10s) {
  db::pool_options opts;
  opts.dsn = test::dsn();
  opts.max_size = max_size;
  opts.acquire_timeout = acquire_timeout;
  return opts;
}

/// Set by the suites that run with both bulk write paths (see bulk_path).
std::optional<size_t> copy_threshold_under_test;

/// A pool, a bus on it and a separate connection for checks.
struct bus_env {
  explicit bus_env(size_t max_size = 4, command_bus_options bus_opts = {},
                   std::chrono::milliseconds acquire_timeout = 10s)
      : pool(pool_options(max_size, acquire_timeout)),
        bus(pool, with_path(bus_opts)), conn(test::connect()) {
    // nop
  }
  db::pool pool;
  command_bus bus;
  db::connection conn;

  static command_bus_options with_path(command_bus_options opts) {
    if (copy_threshold_under_test)
      opts.copy_threshold = *copy_threshold_under_test;
    return opts;
  }
};

command_bus_options chunked(size_t chunk_size) {
  command_bus_options opts;
  opts.chunk_size = chunk_size;
  return opts;
}

send_request make_req(const std::string& domain,
                      const std::string& type = "DebitAccount",
                      const std::string& data = R"({"amount":100})") {
  send_request req;
  req.domain = domain;
  req.command_type = type;
  req.command_id = uuid::random();
  req.data = json::parse(data);
  return req;
}

batch_command make_cmd(const std::string& type = "DebitAccount",
                       const std::string& data = R"({"amount":1})") {
  batch_command c;
  c.command_type = type;
  c.command_id = uuid::random();
  c.data = json::parse(data);
  return c;
}

std::string queue_of(const std::string& domain) {
  return domain + "__commands";
}

// -- state checks (SQL) ------------------------------------------------------

int64_t command_rows(db::connection& c, const std::string& domain) {
  return c.query("SELECT count(*) FROM commandbus.command WHERE domain = $1",
                 domain)
    .int64(0, 0);
}

bool command_row_exists(db::connection& c, const std::string& domain,
                        const uuid& id) {
  return c
           .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 "
                  "AND command_id = $2::uuid",
                  domain, id.to_string())
           .int64(0, 0)
         == 1;
}

int64_t audit_rows(db::connection& c, const std::string& domain,
                   const std::string& event_type = "SENT") {
  return c
    .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1 AND "
           "event_type = $2",
           domain, event_type)
    .int64(0, 0);
}

bool queue_exists(db::connection& c, const std::string& queue) {
  return c.query("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1", queue)
           .int64(0, 0)
         > 0;
}

/// Messages in the queue (0 when the queue does not exist).
int64_t queue_length(db::connection& c, const std::string& queue) {
  if (!queue_exists(c, queue))
    return 0;
  db::validate_queue_name(queue);
  return c.exec("SELECT count(*) FROM pgmq.q_" + queue).int64(0, 0);
}

/// Messages in the domain's queue that carry `id`.
int64_t messages_for(db::connection& c, const std::string& domain,
                     const uuid& id) {
  auto queue = queue_of(domain);
  if (!queue_exists(c, queue))
    return 0;
  return c
    .query("SELECT count(*) FROM pgmq.q_" + queue
             + " WHERE message->>'command_id' = $1",
           id.to_string())
    .int64(0, 0);
}

/// The PostgreSQL-normalised text of a jsonb value.
std::string jsonb_text(db::connection& c, const std::string& json_text) {
  return c.query("SELECT $1::jsonb::text", json_text).opt_text(0, 0).value();
}

/// A PGMQ command message as stored.
struct queued_message {
  std::string keys; // sorted, comma-separated
  opt_str domain;
  opt_str command_type;
  opt_str command_id;
  opt_str correlation_id;
  std::string data; // jsonb text
  bool has_reply_to = false;
  opt_str reply_to;
};

std::optional<queued_message> read_message(db::connection& c,
                                           const std::string& queue,
                                           int64_t msg_id) {
  db::validate_queue_name(queue);
  auto r = c.query(
    "SELECT (SELECT string_agg(k, ',' ORDER BY k) FROM "
    "jsonb_object_keys(message) AS k), message->>'domain', "
    "message->>'command_type', message->>'command_id', "
    "message->>'correlation_id', (message->'data')::text, "
    "message ? 'reply_to', message->>'reply_to' FROM pgmq.q_"
      + queue + " WHERE msg_id = $1::bigint",
    msg_id);
  if (r.rows() == 0)
    return std::nullopt;
  queued_message m;
  m.keys = std::string{r.text(0, 0)};
  m.domain = r.opt_text(0, 1);
  m.command_type = r.opt_text(0, 2);
  m.command_id = r.opt_text(0, 3);
  m.correlation_id = r.opt_text(0, 4);
  m.data = std::string{r.text(0, 5)};
  m.has_reply_to = r.boolean(0, 6);
  m.reply_to = r.opt_text(0, 7);
  return m;
}

/// A command row as stored.
struct command_row {
  std::string queue_name;
  std::string command_type;
  std::string status;
  int64_t attempts = -1;
  int64_t max_attempts = -1;
  std::optional<int64_t> msg_id;
  std::string reply_queue;
  opt_str correlation_id;
  opt_str batch_id;
};

std::optional<command_row> read_row(db::connection& c,
                                    const std::string& domain,
                                    const uuid& id) {
  auto r = c.query("SELECT queue_name, command_type, status, attempts, "
                   "max_attempts, msg_id, reply_queue, correlation_id, "
                   "batch_id FROM commandbus.command WHERE domain = $1 AND "
                   "command_id = $2::uuid",
                   domain, id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  command_row row;
  row.queue_name = std::string{r.text(0, 0)};
  row.command_type = std::string{r.text(0, 1)};
  row.status = std::string{r.text(0, 2)};
  row.attempts = r.int64(0, 3);
  row.max_attempts = r.int64(0, 4);
  if (!r.is_null(0, 5))
    row.msg_id = r.int64(0, 5);
  row.reply_queue = std::string{r.text(0, 6)};
  row.correlation_id = r.opt_text(0, 7);
  row.batch_id = r.opt_text(0, 8);
  return row;
}

/// The SENT audit rows of a command.
struct sent_audit {
  int64_t count = 0;
  std::string keys; // sorted, comma-separated
  opt_str command_type;
  opt_str correlation_id;
  opt_str reply_to;
  opt_str msg_id;
  opt_str batch_id;
  opt_str batch_id_type; // jsonb_typeof, nullopt when the key is absent
};

sent_audit read_sent(db::connection& c, const std::string& domain,
                     const uuid& id) {
  auto r = c.query(
    "SELECT count(*) OVER (), (SELECT string_agg(k, ',' ORDER BY k) FROM "
    "jsonb_object_keys(a.details_json) AS k), "
    "a.details_json->>'command_type', a.details_json->>'correlation_id', "
    "a.details_json->>'reply_to', a.details_json->>'msg_id', "
    "a.details_json->>'batch_id', jsonb_typeof(a.details_json->'batch_id') "
    "FROM commandbus.audit a WHERE a.domain = $1 AND a.command_id = $2::uuid "
    "AND a.event_type = 'SENT' ORDER BY a.audit_id",
    domain, id.to_string());
  sent_audit out;
  if (r.rows() == 0)
    return out;
  out.count = r.int64(0, 0);
  out.keys = std::string{r.text(0, 1)};
  out.command_type = r.opt_text(0, 2);
  out.correlation_id = r.opt_text(0, 3);
  out.reply_to = r.opt_text(0, 4);
  out.msg_id = r.opt_text(0, 5);
  out.batch_id = r.opt_text(0, 6);
  out.batch_id_type = r.opt_text(0, 7);
  return out;
}

void set_status(db::connection& c, const std::string& domain, const uuid& id,
                const std::string& status) {
  c.query("UPDATE commandbus.command SET status = $3 WHERE domain = $1 AND "
          "command_id = $2::uuid",
          domain, id.to_string(), status);
}

void set_created_at(db::connection& c, const std::string& domain,
                    const uuid& id, const std::string& ts) {
  c.query("UPDATE commandbus.command SET created_at = $3::timestamptz WHERE "
          "domain = $1 AND command_id = $2::uuid",
          domain, id.to_string(), ts);
}

void insert_batch_row(db::connection& c, const std::string& domain,
                      const uuid& id) {
  c.query("INSERT INTO commandbus.batch (domain, batch_id, status, "
          "total_count) VALUES ($1, $2::uuid, 'PENDING', 1)",
          domain, id.to_string());
}

std::vector<std::string> ids_of(const std::vector<command_metadata>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    out.push_back(x.command_id.to_string());
  return out;
}

// -- concurrency helpers -----------------------------------------------------

/// Releases all `n` threads at once when the last one arrives.
class start_gate {
public:
  explicit start_gate(int n) : n_(n) {
    // nop
  }
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock{mtx_};
    if (++arrived_ >= n_) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [this] { return arrived_ >= n_; });
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
};

// -- notifications -----------------------------------------------------------

/// Collects notifications until `want` arrived or `budget` passed.
std::vector<std::string> collect_notifications(db::connection& listener,
                                               size_t want,
                                               std::chrono::milliseconds budget
                                               = 5s) {
  std::vector<std::string> out;
  auto deadline = std::chrono::steady_clock::now() + budget;
  while (out.size() < want) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    auto got = listener.wait_for_notifications(left);
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

size_t count_of(const std::vector<std::string>& xs, const std::string& x) {
  return static_cast<size_t>(std::count(xs.begin(), xs.end(), x));
}

} // namespace

// Bulk writes (send_batch, create_batch) go through one of two paths,
// INSERT ... SELECT statements for small chunks and COPY for large ones
// (command_bus_options::copy_threshold). The suites that write in bulk run
// with each path forced.
class bulk_path : public ::testing::TestWithParam<size_t> {
protected:
  void SetUp() override {
    copy_threshold_under_test = GetParam();
  }
  void TearDown() override {
    copy_threshold_under_test.reset();
  }
};

std::string bulk_path_name(const ::testing::TestParamInfo<size_t>& info) {
  return info.param == 1 ? "Copy" : "Statements";
}

#define CMDBUS_BULK_SUITE(name)                                                \
  class name : public bulk_path {};                                            \
  INSTANTIATE_TEST_SUITE_P(                                                    \
      Paths, name,                                                             \
      ::testing::Values(std::numeric_limits<size_t>::max(), size_t{1}),        \
      bulk_path_name)

CMDBUS_BULK_SUITE(BusSendBatch);
CMDBUS_BULK_SUITE(BusCreateBatch);
CMDBUS_BULK_SUITE(BusOutbox);
CMDBUS_BULK_SUITE(BusCorrelation);
CMDBUS_BULK_SUITE(BusSendBatchId);
CMDBUS_BULK_SUITE(BusIdempotency);

// ============================================================================
// send
// ============================================================================

TEST(BusSend, StoresPendingRowAndQueuesReferenceMessage) {
  bus_env env;
  auto d = test::unique_name("bs");
  auto req = make_req(d, "DebitAccount",
                      R"({"amount":100,"currency":"EUR","tags":["a","b"],"nested":{"k":null}})");
  req.correlation_id = uuid::random();
  req.reply_to = d + "__replies";
  req.max_attempts = 5;
  auto res = env.bus.send(req);
  EXPECT_EQ(res.command_id.to_string(), req.command_id.to_string());
  EXPECT_GT(res.msg_id, 0);

  auto row = read_row(env.conn, d, req.command_id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->queue_name, d + "__commands");
  EXPECT_EQ(row->command_type, "DebitAccount");
  EXPECT_EQ(row->status, "PENDING");
  EXPECT_EQ(row->attempts, 0);
  EXPECT_EQ(row->max_attempts, 5);
  EXPECT_EQ(row->msg_id, std::optional<int64_t>{res.msg_id});
  EXPECT_EQ(row->reply_queue, d + "__replies");
  EXPECT_EQ(row->correlation_id, opt_str{req.correlation_id->to_string()});
  EXPECT_FALSE(row->batch_id);

  auto msg = read_message(env.conn, queue_of(d), res.msg_id);
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->keys,
            "command_id,command_type,correlation_id,data,domain,reply_to");
  EXPECT_EQ(msg->domain, opt_str{d});
  EXPECT_EQ(msg->command_type, opt_str{"DebitAccount"});
  EXPECT_EQ(msg->command_id, opt_str{req.command_id.to_string()});
  EXPECT_EQ(msg->correlation_id, opt_str{req.correlation_id->to_string()});
  EXPECT_EQ(msg->data, jsonb_text(env.conn, req.data.text()));
  EXPECT_TRUE(msg->has_reply_to);
  EXPECT_EQ(msg->reply_to, opt_str{d + "__replies"});
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);

  auto audit = read_sent(env.conn, d, req.command_id);
  EXPECT_EQ(audit.count, 1);
  EXPECT_EQ(audit.keys, "batch_id,command_type,correlation_id,msg_id,reply_to");
  EXPECT_EQ(audit.command_type, opt_str{"DebitAccount"});
  EXPECT_EQ(audit.correlation_id, opt_str{req.correlation_id->to_string()});
  EXPECT_EQ(audit.reply_to, opt_str{d + "__replies"});
  EXPECT_EQ(audit.msg_id, opt_str{std::to_string(res.msg_id)});
  EXPECT_FALSE(audit.batch_id);
  EXPECT_EQ(audit.batch_id_type, opt_str{"null"});
}

TEST(BusSend, WithoutReplyToStoresEmptyReplyQueueAndOmitsKey) {
  bus_env env;
  auto d = test::unique_name("bs");
  auto req = make_req(d, "Credit", "{}");
  auto res = env.bus.send(req);
  auto row = read_row(env.conn, d, req.command_id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->reply_queue, "");
  EXPECT_EQ(row->max_attempts, 3);
  auto msg = read_message(env.conn, queue_of(d), res.msg_id);
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->keys, "command_id,command_type,correlation_id,data,domain");
  EXPECT_FALSE(msg->has_reply_to);
  EXPECT_EQ(msg->data, "{}");
  auto audit = read_sent(env.conn, d, req.command_id);
  EXPECT_EQ(audit.count, 1);
  EXPECT_EQ(audit.keys, "batch_id,command_type,correlation_id,msg_id,reply_to");
  EXPECT_FALSE(audit.reply_to); // JSON null
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta);
  EXPECT_FALSE(meta->reply_to);
}

TEST(BusSend, MaxAttemptsGivenDefaultOrZeroFallsBack) {
  bus_env env;
  auto d = test::unique_name("bs");
  auto given = make_req(d);
  given.max_attempts = 7;
  auto unset = make_req(d);
  auto zero = make_req(d);
  zero.max_attempts = 0;
  env.bus.send(given);
  env.bus.send(unset);
  env.bus.send(zero);
  EXPECT_EQ(read_row(env.conn, d, given.command_id)->max_attempts, 7);
  EXPECT_EQ(read_row(env.conn, d, unset.command_id)->max_attempts, 3);
  EXPECT_EQ(read_row(env.conn, d, zero.command_id)->max_attempts, 3);

  // A bus with another default applies it to unset and 0.
  command_bus_options opts;
  opts.default_max_attempts = 9;
  command_bus bus9{env.pool, opts};
  auto unset9 = make_req(d);
  auto zero9 = make_req(d);
  zero9.max_attempts = 0;
  bus9.send(unset9);
  bus9.send(zero9);
  EXPECT_EQ(read_row(env.conn, d, unset9.command_id)->max_attempts, 9);
  EXPECT_EQ(read_row(env.conn, d, zero9.command_id)->max_attempts, 9);
}

TEST(BusSend, ConsecutiveSendsGetIncreasingMsgIds) {
  bus_env env;
  auto d = test::unique_name("bs");
  int64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    auto res = env.bus.send(make_req(d));
    EXPECT_GT(res.msg_id, last);
    last = res.msg_id;
  }
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 5);
  EXPECT_EQ(command_rows(env.conn, d), 5);
  EXPECT_EQ(audit_rows(env.conn, d), 5);
}

TEST(BusSend, RejectsEmptyTypeAndNonObjectDataWithoutWriting) {
  bus_env env;
  auto d = test::unique_name("bs");
  auto no_type = make_req(d, "");
  EXPECT_THROW(env.bus.send(no_type), command_bus_error);
  auto array = make_req(d, "T", "[1,2]");
  EXPECT_THROW(env.bus.send(array), command_bus_error);
  auto null_data = make_req(d, "T", "null");
  EXPECT_THROW(env.bus.send(null_data), command_bus_error);
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
}

// A bus on a pool of one connection must be able to send: send() holds one
// pooled connection while it creates the queue on demand.
TEST(BusSend, WorksWithASingleConnectionPool) {
  bus_env env{1, {}, 1500ms};
  auto d = test::unique_name("bs");
  auto req = make_req(d);
  req.reply_to = d + "__replies";
  send_result res;
  EXPECT_NO_THROW(res = env.bus.send(req));
  EXPECT_TRUE(command_row_exists(env.conn, d, req.command_id));
  auto d3 = test::unique_name("bs");
  EXPECT_NO_THROW(env.bus.send_batch({make_req(d3), make_req(d3)}));
  EXPECT_EQ(command_rows(env.conn, d3), 2);
  std::vector<batch_command> cmds{make_cmd(), make_cmd()};
  auto d2 = test::unique_name("bs");
  EXPECT_NO_THROW(env.bus.create_batch(d2, cmds));
  EXPECT_EQ(command_rows(env.conn, d2), 2);
}

// send() writes the message into the queue's table with a cached plan rather
// than through pgmq.send: the row must be the one pgmq.send(queue, msg, 0)
// writes, and a mixed-case domain must land in PGMQ's lower-case table.
TEST(BusSend, QueueRowIsTheOnePgmqSendWrites) {
  bus_env env;
  auto d = "Mx" + test::unique_name("bs");
  auto queue = queue_of(d);
  auto res = env.bus.send(make_req(d));
  auto by_pgmq =
      env.conn
          .query("SELECT * FROM pgmq.send($1, '{\"k\":1}'::jsonb, 0)", queue)
          .int64(0, 0);
  EXPECT_EQ(by_pgmq, res.msg_id + 1);
  auto table = db::queue_table(queue);
  EXPECT_EQ(table, "q_mx" + d.substr(2) + "__commands");
  auto rows = env.conn.exec(
      "SELECT msg_id, read_ct, headers IS NULL, vt >= enqueued_at, vt <= "
      "clock_timestamp(), enqueued_at <= clock_timestamp() FROM pgmq.\""
      + table + "\" ORDER BY msg_id");
  ASSERT_EQ(rows.rows(), 2);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(rows.int64(i, 1), 0);
    for (int col = 2; col <= 5; ++col)
      EXPECT_TRUE(rows.boolean(i, col)) << rows.column_name(col);
  }
  // Readable under the name as sent, like any pgmq.send message.
  auto read = env.conn.query(
      "SELECT msg_id, message->>'domain' FROM pgmq.read($1, 30, 10)", queue);
  ASSERT_EQ(read.rows(), 2);
  EXPECT_EQ(read.int64(0, 0), res.msg_id);
  EXPECT_EQ(read.text(0, 1), d);
}

// The bus remembers the queues it created. When one is dropped behind its
// back, send fails with the database's error and writes nothing; once the
// queue exists again, the same pooled connection sends to the new table.
TEST(BusSend, DroppedQueueFailsCleanlyAndRecreatedQueueWorks) {
  bus_env env{1};
  auto d = test::unique_name("bs");
  env.bus.send(make_req(d));
  env.conn.query("SELECT pgmq.drop_queue($1)", queue_of(d));
  auto lost = make_req(d);
  try {
    env.bus.send(lost);
    ADD_FAILURE() << "sent to a dropped queue";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "42P01") << e.what();
  }
  EXPECT_FALSE(command_row_exists(env.conn, d, lost.command_id));
  env.conn.query("SELECT pgmq.create($1)", queue_of(d));
  auto again = make_req(d);
  auto res = env.bus.send(again);
  EXPECT_EQ(res.msg_id, 1);
  EXPECT_EQ(messages_for(env.conn, d, again.command_id), 1);
  EXPECT_TRUE(command_row_exists(env.conn, d, again.command_id));
}

// With the default options, a chunk of 100 goes through COPY, one of 99
// through cmdbus_send_commands: the transaction's function statistics tell
// (track_functions is set for the caller's transaction, which the chunk
// joins).
TEST(BusSendBatchPaths, DefaultCopyThresholdIs100) {
  EXPECT_EQ(command_bus_options{}.copy_threshold, 100u);
  bus_env env;
  for (int n : {99, 100}) {
    SCOPED_TRACE(n);
    auto d = test::unique_name("bt");
    std::vector<send_request> reqs;
    for (int i = 0; i < n; ++i)
      reqs.push_back(make_req(d));
    auto conn = test::connect();
    db::transaction tx{conn};
    conn.exec("SET LOCAL track_functions = 'pl'");
    env.bus.send_batch(reqs, conn);
    auto calls = conn.exec("SELECT COALESCE(pg_stat_get_xact_function_calls("
                           "'commandbus.cmdbus_send_commands'::regproc), 0)")
                     .int64(0, 0);
    EXPECT_EQ(calls, n == 100 ? 0 : 1);
    tx.commit();
    EXPECT_EQ(command_rows(env.conn, d), n);
    EXPECT_EQ(queue_length(env.conn, queue_of(d)), n);
  }
}

// ============================================================================
// idempotency
// ============================================================================

TEST_P(BusIdempotency, DuplicateIsRejectedWithIdAndDomain) {
  bus_env env;
  auto d = test::unique_name("bi");
  auto req = make_req(d, "First");
  auto first = env.bus.send(req);
  auto again = req;
  again.command_type = "Second";
  again.data = json::parse(R"({"other":true})");
  try {
    env.bus.send(again);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), req.command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  // No second row, message or audit.
  EXPECT_EQ(command_rows(env.conn, d), 1);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);
  EXPECT_EQ(audit_rows(env.conn, d), 1);
  // The existing command is unchanged and still queryable.
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->command_type, "First");
  EXPECT_EQ(meta->msg_id, std::optional<int64_t>{first.msg_id});
  EXPECT_TRUE(env.bus.command_exists(d, req.command_id));
  // The pooled connections are still usable afterwards.
  EXPECT_NO_THROW(env.bus.send(make_req(d)));
  EXPECT_EQ(command_rows(env.conn, d), 2);
}

// The duplicate's lookup must not need a second connection: with a pool of
// one, send_batch still names the duplicate (instead of timing out).
TEST_P(BusIdempotency, DuplicateInBatchIsNamedWithAOneConnectionPool) {
  bus_env env{1, {}, 1500ms};
  auto d = test::unique_name("bi");
  auto existing = make_req(d);
  env.bus.send(existing);
  auto again = existing;
  try {
    env.bus.send_batch({make_req(d), again, make_req(d)});
    ADD_FAILURE() << "the duplicate was not reported";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_EQ(command_rows(env.conn, d), 1);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);
}

TEST_P(BusIdempotency, SameIdInAnotherDomainIsAllowed) {
  bus_env env;
  auto a = test::unique_name("bia");
  auto b = test::unique_name("bib");
  auto req_a = make_req(a);
  auto req_b = make_req(b);
  req_b.command_id = req_a.command_id;
  env.bus.send(req_a);
  EXPECT_NO_THROW(env.bus.send(req_b));
  EXPECT_TRUE(command_row_exists(env.conn, a, req_a.command_id));
  EXPECT_TRUE(command_row_exists(env.conn, b, req_a.command_id));
  EXPECT_EQ(messages_for(env.conn, a, req_a.command_id), 1);
  EXPECT_EQ(messages_for(env.conn, b, req_a.command_id), 1);
}

TEST_P(BusIdempotency, DuplicateOnCallersConnectionIsRejected) {
  bus_env env;
  auto d = test::unique_name("bi");
  auto req = make_req(d);
  env.bus.send(req);
  auto conn = test::connect();
  EXPECT_THROW(env.bus.send(req, conn), duplicate_command_error);
  EXPECT_EQ(command_rows(env.conn, d), 1);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);
}

namespace {

struct race_outcome {
  int ok = 0;
  int duplicates = 0;
  std::vector<std::string> others;
};

/// Runs `send(i)` on `n` threads released at the same moment.
template <class F>
race_outcome race(int n, F send) {
  race_outcome out;
  std::mutex mtx;
  start_gate gate{n};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      gate.arrive_and_wait();
      try {
        send(i);
        std::lock_guard<std::mutex> guard{mtx};
        ++out.ok;
      } catch (const duplicate_command_error&) {
        std::lock_guard<std::mutex> guard{mtx};
        ++out.duplicates;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> guard{mtx};
        out.others.push_back(e.what());
      }
    });
  for (auto& t : threads)
    t.join();
  return out;
}

std::string joined(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += x + "\n";
  return out;
}

} // namespace

TEST_P(BusIdempotency, ConcurrentDuplicatesOneWinsSeparateBuses) {
  constexpr int threads = 8;
  constexpr int rounds = 5;
  auto check = test::connect();
  auto d = test::unique_name("br");
  // One pool and bus per thread: like separate processes. Round 1 also
  // races on creating the queue.
  std::vector<std::unique_ptr<db::pool>> pools;
  std::vector<std::unique_ptr<command_bus>> buses;
  for (int i = 0; i < threads; ++i) {
    pools.push_back(std::make_unique<db::pool>(pool_options(2)));
    buses.push_back(std::make_unique<command_bus>(*pools.back()));
  }
  for (int round = 0; round < rounds; ++round) {
    auto req = make_req(d);
    auto out = race(threads, [&](int i) {
      auto mine = req;
      mine.data = json::parse("{\"thread\":" + std::to_string(i) + "}");
      buses[static_cast<size_t>(i)]->send(mine);
    });
    EXPECT_EQ(out.ok, 1) << "round " << round;
    EXPECT_EQ(out.duplicates, threads - 1) << "round " << round;
    EXPECT_TRUE(out.others.empty()) << joined(out.others);
    EXPECT_TRUE(command_row_exists(check, d, req.command_id));
    EXPECT_EQ(messages_for(check, d, req.command_id), 1) << "round " << round;
    EXPECT_EQ(read_sent(check, d, req.command_id).count, 1);
  }
  EXPECT_EQ(command_rows(check, d), rounds);
  EXPECT_EQ(queue_length(check, queue_of(d)), rounds);
  EXPECT_EQ(audit_rows(check, d), rounds);
}

TEST_P(BusIdempotency, ConcurrentDuplicatesOneWinsSharedBus) {
  constexpr int threads = 8;
  constexpr int rounds = 5;
  bus_env env{threads};
  auto d = test::unique_name("br");
  for (int round = 0; round < rounds; ++round) {
    auto req = make_req(d);
    auto out = race(threads, [&](int) { env.bus.send(req); });
    EXPECT_EQ(out.ok, 1) << "round " << round;
    EXPECT_EQ(out.duplicates, threads - 1) << "round " << round;
    EXPECT_TRUE(out.others.empty()) << joined(out.others);
    EXPECT_EQ(messages_for(env.conn, d, req.command_id), 1);
    EXPECT_EQ(read_sent(env.conn, d, req.command_id).count, 1);
  }
  EXPECT_EQ(command_rows(env.conn, d), rounds);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), rounds);
}

// ============================================================================
// correlation id (D8)
// ============================================================================

TEST_P(BusCorrelation, ExplicitIdIsStoredAndInMessage) {
  bus_env env;
  auto d = test::unique_name("bc");
  auto req = make_req(d);
  auto corr = uuid::random();
  req.correlation_id = corr;
  auto res = env.bus.send(req);
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta && meta->correlation_id);
  EXPECT_EQ(meta->correlation_id->to_string(), corr.to_string());
  EXPECT_EQ(read_message(env.conn, queue_of(d), res.msg_id)->correlation_id,
            opt_str{corr.to_string()});
  EXPECT_EQ(read_sent(env.conn, d, req.command_id).correlation_id,
            opt_str{corr.to_string()});
}

TEST_P(BusCorrelation, GeneratedIdIsTheSameInMessageAndRow) {
  bus_env env;
  auto d = test::unique_name("bc");
  auto req1 = make_req(d);
  auto req2 = make_req(d);
  auto r1 = env.bus.send(req1);
  auto r2 = env.bus.send(req2);
  auto row1 = read_row(env.conn, d, req1.command_id);
  auto row2 = read_row(env.conn, d, req2.command_id);
  ASSERT_TRUE(row1 && row1->correlation_id);
  ASSERT_TRUE(row2 && row2->correlation_id);
  EXPECT_TRUE(uuid::parse(*row1->correlation_id));
  EXPECT_NE(*row1->correlation_id, *row2->correlation_id);
  EXPECT_EQ(read_message(env.conn, queue_of(d), r1.msg_id)->correlation_id,
            row1->correlation_id);
  EXPECT_EQ(read_message(env.conn, queue_of(d), r2.msg_id)->correlation_id,
            row2->correlation_id);
  EXPECT_EQ(read_sent(env.conn, d, req1.command_id).correlation_id,
            row1->correlation_id);
}

TEST_P(BusCorrelation, SendBatchKeepsGivenAndMatchesGenerated) {
  bus_env env;
  auto d = test::unique_name("bc");
  std::vector<send_request> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(make_req(d));
    if (i % 2 == 0)
      reqs.back().correlation_id = uuid::random();
  }
  auto res = env.bus.send_batch(reqs);
  ASSERT_EQ(res.results.size(), reqs.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto row = read_row(env.conn, d, reqs[i].command_id);
    ASSERT_TRUE(row && row->correlation_id);
    if (reqs[i].correlation_id) {
      EXPECT_EQ(*row->correlation_id, reqs[i].correlation_id->to_string());
    }
    auto msg = read_message(env.conn, queue_of(d), res.results[i].msg_id);
    ASSERT_TRUE(msg);
    EXPECT_EQ(msg->correlation_id, row->correlation_id) << i;
    EXPECT_EQ(read_sent(env.conn, d, reqs[i].command_id).correlation_id,
              row->correlation_id);
    seen.insert(*row->correlation_id);
  }
  EXPECT_EQ(seen.size(), reqs.size());
}

TEST_P(BusCorrelation, CreateBatchKeepsGivenAndMatchesGenerated) {
  bus_env env;
  auto d = test::unique_name("bc");
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  cmds[1].correlation_id = uuid::random();
  auto res = env.bus.create_batch(d, cmds);
  ASSERT_EQ(res.command_results.size(), cmds.size());
  for (size_t i = 0; i < cmds.size(); ++i) {
    auto row = read_row(env.conn, d, cmds[i].command_id);
    ASSERT_TRUE(row && row->correlation_id);
    if (cmds[i].correlation_id) {
      EXPECT_EQ(*row->correlation_id, cmds[i].correlation_id->to_string());
    }
    auto msg = read_message(env.conn, queue_of(d), res.command_results[i].msg_id);
    ASSERT_TRUE(msg);
    EXPECT_EQ(msg->correlation_id, row->correlation_id) << i;
  }
}

// ============================================================================
// reply_to and name validation (D10)
// ============================================================================

TEST(BusReplyTo, StoredInMessageAndQueueCreatedOnDemand) {
  bus_env env;
  auto d = test::unique_name("bq");
  auto reply = d + "__replies";
  ASSERT_FALSE(queue_exists(env.conn, reply));
  ASSERT_FALSE(queue_exists(env.conn, queue_of(d)));
  auto req = make_req(d);
  req.reply_to = reply;
  auto res = env.bus.send(req);
  EXPECT_TRUE(queue_exists(env.conn, reply));
  EXPECT_TRUE(queue_exists(env.conn, queue_of(d)));
  EXPECT_EQ(queue_length(env.conn, reply), 0);
  EXPECT_EQ(read_row(env.conn, d, req.command_id)->reply_queue, reply);
  EXPECT_EQ(read_message(env.conn, queue_of(d), res.msg_id)->reply_to,
            opt_str{reply});
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->reply_to, opt_str{reply});
}

TEST(BusReplyTo, BoundaryLengthsAreAccepted) {
  bus_env env;
  auto base = test::unique_name("bq");
  auto d = base + std::string(37 - base.size(), 'x'); // queue: 47 chars
  ASSERT_EQ(d.size(), 37u);
  auto reply = base + std::string(47 - base.size(), 'r');
  auto req = make_req(d);
  req.reply_to = reply;
  EXPECT_NO_THROW(env.bus.send(req));
  EXPECT_TRUE(queue_exists(env.conn, d + "__commands"));
  EXPECT_TRUE(queue_exists(env.conn, reply));
  EXPECT_TRUE(command_row_exists(env.conn, d, req.command_id));
}

TEST(BusReplyTo, InvalidReplyToIsRejectedBeforeAnyWrite) {
  bus_env env;
  auto d = test::unique_name("bq");
  std::vector<std::string> bad{"",
                               std::string(48, 'r'),
                               "it's",
                               "q\"x",
                               "a;DROP TABLE commandbus.command",
                               "caf\xc3\xa9",
                               "has space",
                               "has-hyphen",
                               "pgmq.q_x"};
  for (auto& reply : bad) {
    auto req = make_req(d);
    req.reply_to = reply;
    EXPECT_THROW(env.bus.send(req), db::invalid_argument) << reply;
    auto conn = test::connect();
    EXPECT_THROW(env.bus.send(req, conn), db::invalid_argument) << reply;
    EXPECT_THROW(env.bus.send_batch({req}), db::invalid_argument) << reply;
    batch_command c = make_cmd();
    c.reply_to = reply;
    EXPECT_THROW(env.bus.create_batch(d, {c}), db::invalid_argument) << reply;
  }
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_FALSE(queue_exists(env.conn, queue_of(d)));
  EXPECT_FALSE(queue_exists(env.conn, std::string(48, 'r')));
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM commandbus.batch WHERE domain = $1",
                     d)
              .int64(0, 0),
            0);
}

TEST(BusReplyTo, InvalidDomainIsRejectedBeforeAnyWrite) {
  bus_env env;
  std::vector<std::string> bad{"",
                               std::string(38, 'd'),
                               "it's",
                               "semi;colon",
                               "d\xc3\xb6main",
                               "two words",
                               "with-hyphen",
                               "x\"y"};
  for (auto& d : bad) {
    auto req = make_req(d);
    EXPECT_THROW(env.bus.send(req), db::invalid_argument) << d;
    auto conn = test::connect();
    EXPECT_THROW(env.bus.send(req, conn), db::invalid_argument) << d;
    EXPECT_THROW(env.bus.send_batch({req}), db::invalid_argument) << d;
    EXPECT_THROW(env.bus.create_batch(d, {make_cmd()}), db::invalid_argument)
      << d;
    EXPECT_EQ(command_rows(env.conn, d), 0) << d;
    EXPECT_EQ(audit_rows(env.conn, d), 0) << d;
    EXPECT_EQ(env.conn
                .query("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1",
                       d + "__commands")
                .int64(0, 0),
              0)
      << d;
  }
}

// ============================================================================
// batch_id on send
// ============================================================================

TEST_P(BusSendBatchId, UnknownBatchIsRejectedAndNothingWritten) {
  bus_env env;
  auto d = test::unique_name("bb");
  auto req = make_req(d);
  auto batch = uuid::random();
  req.batch_id = batch;
  try {
    env.bus.send(req);
    FAIL() << "expected batch_not_found_error";
  } catch (const batch_not_found_error& e) {
    EXPECT_EQ(e.batch_id().to_string(), batch.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  // send_batch checks it too.
  EXPECT_THROW(env.bus.send_batch({req}), batch_not_found_error);
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
}

TEST_P(BusSendBatchId, BatchOfAnotherDomainIsNotFound) {
  bus_env env;
  auto d = test::unique_name("bb");
  auto other = test::unique_name("bb");
  auto batch = uuid::random();
  insert_batch_row(env.conn, other, batch);
  auto req = make_req(d);
  req.batch_id = batch;
  EXPECT_THROW(env.bus.send(req), batch_not_found_error);
  EXPECT_EQ(command_rows(env.conn, d), 0);
}

TEST_P(BusSendBatchId, ExistingBatchIsRecordedInRowAndAudit) {
  bus_env env;
  auto d = test::unique_name("bb");
  auto batch = uuid::random();
  insert_batch_row(env.conn, d, batch);
  auto req = make_req(d);
  req.batch_id = batch;
  env.bus.send(req);
  EXPECT_EQ(read_row(env.conn, d, req.command_id)->batch_id,
            opt_str{batch.to_string()});
  auto audit = read_sent(env.conn, d, req.command_id);
  EXPECT_EQ(audit.batch_id, opt_str{batch.to_string()});
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta && meta->batch_id);
  EXPECT_EQ(meta->batch_id->to_string(), batch.to_string());
  // A plain send has none.
  auto plain = make_req(d);
  env.bus.send(plain);
  EXPECT_FALSE(read_row(env.conn, d, plain.command_id)->batch_id);
  EXPECT_FALSE(env.bus.get_command(d, plain.command_id)->batch_id);
}

// ============================================================================
// send_batch
// ============================================================================

TEST_P(BusSendBatch, ChunksKeepInputOrderAndPairMsgIds) {
  bus_env env{4, chunked(10)};
  auto d = test::unique_name("bsb");
  std::vector<send_request> reqs;
  for (int i = 0; i < 25; ++i)
    reqs.push_back(make_req(d, "T" + std::to_string(i % 3),
                            "{\"i\":" + std::to_string(i) + "}"));
  reqs[3].reply_to = d + "__replies";
  reqs[4].max_attempts = 6;
  auto res = env.bus.send_batch(reqs);
  EXPECT_EQ(res.chunks_processed, 3);
  EXPECT_EQ(res.total_commands, 25);
  ASSERT_EQ(res.results.size(), 25u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(res.results[i].command_id.to_string(),
              reqs[i].command_id.to_string());
    if (i > 0) {
      EXPECT_GT(res.results[i].msg_id, res.results[i - 1].msg_id) << i;
    }
    // The returned msg_id is the row's and carries this command.
    auto row = read_row(env.conn, d, reqs[i].command_id);
    ASSERT_TRUE(row) << i;
    EXPECT_EQ(row->msg_id, std::optional<int64_t>{res.results[i].msg_id});
    EXPECT_EQ(row->status, "PENDING");
    EXPECT_EQ(row->attempts, 0);
    EXPECT_EQ(row->command_type, reqs[i].command_type);
    auto msg = read_message(env.conn, queue_of(d), res.results[i].msg_id);
    ASSERT_TRUE(msg) << i;
    EXPECT_EQ(msg->command_id, opt_str{reqs[i].command_id.to_string()});
    EXPECT_EQ(msg->data, jsonb_text(env.conn, reqs[i].data.text()));
    auto audit = read_sent(env.conn, d, reqs[i].command_id);
    EXPECT_EQ(audit.count, 1);
    EXPECT_EQ(audit.msg_id, opt_str{std::to_string(res.results[i].msg_id)});
    // send_batch without batch_id: no batch_id key (reference).
    EXPECT_EQ(audit.keys, "command_type,correlation_id,msg_id,reply_to");
  }
  auto r3 = read_row(env.conn, d, reqs[3].command_id);
  EXPECT_EQ(r3->reply_queue, d + "__replies");
  EXPECT_EQ(read_message(env.conn, queue_of(d), res.results[3].msg_id)->reply_to,
            opt_str{d + "__replies"});
  EXPECT_TRUE(queue_exists(env.conn, d + "__replies"));
  EXPECT_FALSE(read_message(env.conn, queue_of(d), res.results[2].msg_id)
                 ->has_reply_to);
  EXPECT_EQ(read_row(env.conn, d, reqs[4].command_id)->max_attempts, 6);
  EXPECT_EQ(read_row(env.conn, d, reqs[5].command_id)->max_attempts, 3);
  EXPECT_EQ(command_rows(env.conn, d), 25);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 25);
  EXPECT_EQ(audit_rows(env.conn, d), 25);
}

TEST_P(BusSendBatch, ExactMultipleOfChunkSize) {
  bus_env env{4, chunked(5)};
  auto d = test::unique_name("bsb");
  std::vector<send_request> reqs;
  for (int i = 0; i < 10; ++i)
    reqs.push_back(make_req(d));
  auto res = env.bus.send_batch(reqs);
  EXPECT_EQ(res.chunks_processed, 2);
  EXPECT_EQ(res.total_commands, 10);
  EXPECT_EQ(command_rows(env.conn, d), 10);
}

TEST_P(BusSendBatch, MultipleDomainsInOneCall) {
  bus_env env;
  auto a = test::unique_name("bsa");
  auto b = test::unique_name("bsb");
  std::vector<send_request> reqs;
  for (int i = 0; i < 8; ++i)
    reqs.push_back(make_req(i % 2 == 0 ? b : a)); // b first on purpose
  auto res = env.bus.send_batch(reqs);
  EXPECT_EQ(res.chunks_processed, 1);
  EXPECT_EQ(res.total_commands, 8);
  ASSERT_EQ(res.results.size(), 8u);
  int64_t last_a = 0, last_b = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(res.results[i].command_id.to_string(),
              reqs[i].command_id.to_string());
    auto& last = reqs[i].domain == a ? last_a : last_b;
    EXPECT_GT(res.results[i].msg_id, last) << i;
    last = res.results[i].msg_id;
    auto msg = read_message(env.conn, queue_of(reqs[i].domain),
                            res.results[i].msg_id);
    ASSERT_TRUE(msg) << i;
    EXPECT_EQ(msg->command_id, opt_str{reqs[i].command_id.to_string()});
    EXPECT_EQ(msg->domain, opt_str{reqs[i].domain});
    EXPECT_EQ(read_row(env.conn, reqs[i].domain, reqs[i].command_id)->queue_name,
              queue_of(reqs[i].domain));
  }
  EXPECT_EQ(command_rows(env.conn, a), 4);
  EXPECT_EQ(command_rows(env.conn, b), 4);
  EXPECT_EQ(queue_length(env.conn, queue_of(a)), 4);
  EXPECT_EQ(queue_length(env.conn, queue_of(b)), 4);
  EXPECT_EQ(audit_rows(env.conn, a), 4);
  EXPECT_EQ(audit_rows(env.conn, b), 4);
}

TEST_P(BusSendBatch, OneTransactionPerChunk) {
  bus_env env{4, chunked(10)};
  auto d = test::unique_name("bsb");
  auto existing = make_req(d);
  env.bus.send(existing);
  std::vector<send_request> reqs;
  for (int i = 0; i < 25; ++i)
    reqs.push_back(make_req(d));
  reqs[14].command_id = existing.command_id; // in chunk 2
  try {
    env.bus.send_batch(reqs);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  // Chunk 1 committed, chunk 2 entirely absent, chunk 3 never sent.
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i == 14)
      continue;
    EXPECT_EQ(command_row_exists(env.conn, d, reqs[i].command_id), i < 10) << i;
    EXPECT_EQ(messages_for(env.conn, d, reqs[i].command_id), i < 10 ? 1 : 0)
      << i;
  }
  EXPECT_EQ(command_rows(env.conn, d), 11);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 11);
  EXPECT_EQ(audit_rows(env.conn, d), 11);
  EXPECT_EQ(messages_for(env.conn, d, existing.command_id), 1);
}

TEST_P(BusSendBatch, DuplicatesWithinInputRejectedBeforeAnyWrite) {
  bus_env env{4, chunked(2)};
  auto d = test::unique_name("bsb");
  std::vector<send_request> reqs{make_req(d), make_req(d), make_req(d),
                                 make_req(d), make_req(d)};
  reqs[4].command_id = reqs[0].command_id; // would be in chunk 3
  try {
    env.bus.send_batch(reqs);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), reqs[0].command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  // The same id in two domains is not a duplicate.
  auto other = test::unique_name("bsb");
  auto twin = make_req(other);
  twin.command_id = reqs[0].command_id;
  auto res = env.bus.send_batch({reqs[0], twin});
  EXPECT_EQ(res.total_commands, 2);
  EXPECT_TRUE(command_row_exists(env.conn, d, reqs[0].command_id));
  EXPECT_TRUE(command_row_exists(env.conn, other, reqs[0].command_id));
}

// With the same command id in two domains of one chunk, a duplicate in the
// second domain must be reported for that domain, and the chunk rolls back.
TEST_P(BusSendBatch, DuplicateErrorNamesTheDomainThatHasIt) {
  bus_env env;
  auto a = test::unique_name("bda"); // sorts before b
  auto b = test::unique_name("bdb");
  auto existing = make_req(b);
  env.bus.send(existing);
  auto in_a = make_req(a);
  in_a.command_id = existing.command_id;
  auto in_b = make_req(b);
  in_b.command_id = existing.command_id;
  try {
    env.bus.send_batch({in_a, in_b});
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
    EXPECT_EQ(e.domain(), b);
  }
  EXPECT_EQ(command_rows(env.conn, a), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(a)), 0);
  EXPECT_EQ(command_rows(env.conn, b), 1);
}

TEST_P(BusSendBatch, EmptyInputSendsNothing) {
  bus_env env;
  auto res = env.bus.send_batch({});
  EXPECT_TRUE(res.results.empty());
  EXPECT_EQ(res.chunks_processed, 0);
  EXPECT_EQ(res.total_commands, 0);
  auto conn = test::connect();
  auto res2 = env.bus.send_batch({}, conn);
  EXPECT_TRUE(res2.results.empty());
  EXPECT_EQ(res2.chunks_processed, 0);
  EXPECT_EQ(res2.total_commands, 0);
}

TEST_P(BusSendBatch, KeepsBatchIdWhenGiven) {
  bus_env env;
  auto d = test::unique_name("bsb");
  auto batch = uuid::random();
  insert_batch_row(env.conn, d, batch);
  auto with = make_req(d);
  with.batch_id = batch;
  auto without = make_req(d);
  env.bus.send_batch({with, without});
  EXPECT_EQ(read_row(env.conn, d, with.command_id)->batch_id,
            opt_str{batch.to_string()});
  EXPECT_EQ(read_sent(env.conn, d, with.command_id).batch_id,
            opt_str{batch.to_string()});
  EXPECT_FALSE(read_row(env.conn, d, without.command_id)->batch_id);
  EXPECT_FALSE(read_sent(env.conn, d, without.command_id).batch_id_type);
}

TEST_P(BusSendBatch, OneNotificationPerQueuePerChunk) {
  bus_env env{4, chunked(10)};
  auto a = test::unique_name("bna");
  auto b = test::unique_name("bnb");
  auto listener = test::connect();
  listener.listen(db::notify_channel(queue_of(a)));
  listener.listen(db::notify_channel(queue_of(b)));
  std::vector<send_request> reqs;
  for (int i = 0; i < 25; ++i)
    reqs.push_back(make_req(a));
  auto res = env.bus.send_batch(reqs);
  ASSERT_EQ(res.chunks_processed, 3);
  auto got = collect_notifications(listener, 3);
  EXPECT_EQ(count_of(got, "pgmq_notify_" + queue_of(a)), 3u);
  got = listener.wait_for_notifications(300ms);
  EXPECT_TRUE(got.empty()) << got.size() << " extra notification(s)";

  // One chunk with two domains: one notification per queue.
  std::vector<send_request> mixed;
  for (int i = 0; i < 6; ++i)
    mixed.push_back(make_req(i % 2 ? a : b));
  env.bus.send_batch(mixed);
  got = collect_notifications(listener, 2);
  auto more = listener.wait_for_notifications(300ms);
  got.insert(got.end(), more.begin(), more.end());
  EXPECT_EQ(count_of(got, "pgmq_notify_" + queue_of(a)), 1u);
  EXPECT_EQ(count_of(got, "pgmq_notify_" + queue_of(b)), 1u);
  EXPECT_EQ(got.size(), 2u);
}

// Text that needs escaping on its way (JSON, array literal or COPY) is
// stored exactly: the command type in the row, message and audit, and the
// data's strings.
TEST_P(BusSendBatch, TextNeedingEscapesIsStoredExactly) {
  bus_env env;
  auto d = test::unique_name("bb");
  std::string type = "Debit\tnew\nline\r\\back \"q\" {a,b} NULL \xc3\xa9";
  auto req = make_req(
      d, type, R"({"memo":"tab\tnl\nbs\\ q\" \\N \u00e9","n":[1,{"k":null}]})");
  auto plain = make_req(d);
  auto res = env.bus.send_batch({req, plain});
  ASSERT_EQ(res.results.size(), 2u);
  auto row = read_row(env.conn, d, req.command_id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->command_type, type);
  auto msg = read_message(env.conn, queue_of(d), res.results[0].msg_id);
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->command_type, opt_str{type});
  EXPECT_EQ(msg->data, jsonb_text(env.conn, req.data.text()));
  EXPECT_EQ(env.conn
                .query("SELECT message->'data'->>'memo' FROM pgmq.q_"
                           + queue_of(d) + " WHERE msg_id = $1::bigint",
                       res.results[0].msg_id)
                .opt_text(0, 0),
            "tab\tnl\nbs\\ q\" \\N \xc3\xa9");
  EXPECT_EQ(read_sent(env.conn, d, req.command_id).command_type, opt_str{type});
  EXPECT_EQ(read_row(env.conn, d, plain.command_id)->command_type,
            "DebitAccount");
}

// The queue rows are those pgmq.send_batch writes: ids in input order and
// drawn from the queue's sequence (a later pgmq.send continues after them),
// visible at once, unread, without headers.
TEST_P(BusSendBatch, MixedCaseDomainUsesPgmqsTable) {
  bus_env env;
  auto d = "MiXed" + test::unique_name("bb");
  std::vector<send_request> reqs{make_req(d), make_req(d), make_req(d)};
  auto res = env.bus.send_batch(reqs);
  auto read = env.conn.query(
      "SELECT msg_id, message->>'domain' FROM pgmq.read($1, 30, 10)",
      queue_of(d));
  ASSERT_EQ(read.rows(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(read.int64(i, 0), res.results[static_cast<size_t>(i)].msg_id);
    EXPECT_EQ(read.text(i, 1), d);
  }
  EXPECT_EQ(command_rows(env.conn, d), 3);
  EXPECT_EQ(audit_rows(env.conn, d), 3);
}

TEST_P(BusSendBatch, QueueRowsAreThoseOfPgmqSendBatch) {
  bus_env env;
  auto d = test::unique_name("bb");
  std::vector<send_request> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(make_req(d));
  auto res = env.bus.send_batch(reqs);
  for (size_t i = 1; i < res.results.size(); ++i)
    EXPECT_GT(res.results[i].msg_id, res.results[i - 1].msg_id);
  auto next =
      env.conn.query("SELECT * FROM pgmq.send($1, '{}'::jsonb, 0)", queue_of(d))
          .int64(0, 0);
  EXPECT_GT(next, res.results.back().msg_id);
  auto rows = env.conn.exec(
      "SELECT count(*), bool_and(read_ct = 0), bool_and(headers IS NULL), "
      "bool_and(vt >= enqueued_at AND vt <= clock_timestamp()) FROM pgmq.q_"
      + queue_of(d));
  EXPECT_EQ(rows.int64(0, 0), 6);
  EXPECT_TRUE(rows.boolean(0, 1));
  EXPECT_TRUE(rows.boolean(0, 2));
  EXPECT_TRUE(rows.boolean(0, 3));
  auto read = env.conn.query(
      "SELECT msg_id, message->>'command_id' FROM pgmq.read($1, 30, 10)",
      queue_of(d));
  ASSERT_EQ(read.rows(), 6);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(read.int64(i, 0), res.results[static_cast<size_t>(i)].msg_id);
    EXPECT_EQ(read.text(i, 1),
              reqs[static_cast<size_t>(i)].command_id.to_string());
  }
}

TEST(BusSend, NotifiesTheCommandQueueOnce) {
  bus_env env;
  auto d = test::unique_name("bn");
  auto listener = test::connect();
  listener.listen(db::notify_channel(queue_of(d)));
  auto req = make_req(d);
  req.reply_to = d + "__replies";
  listener.listen(db::notify_channel(d + "__replies"));
  env.bus.send(req);
  auto got = collect_notifications(listener, 1);
  auto more = listener.wait_for_notifications(300ms);
  got.insert(got.end(), more.begin(), more.end());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "pgmq_notify_" + queue_of(d));
}

// ============================================================================
// create_batch
// ============================================================================

TEST_P(BusCreateBatch, StoresBatchCommandsMessagesAndAudits) {
  bus_env env;
  auto d = test::unique_name("bcb");
  std::vector<batch_command> cmds{make_cmd("A", R"({"n":1})"),
                                  make_cmd("B", R"({"n":2})"),
                                  make_cmd("C", R"({"n":3})")};
  cmds[1].max_attempts = 8;
  cmds[2].reply_to = d + "__replies";
  create_batch_options opts;
  opts.batch_id = uuid::random();
  opts.name = "month-end run";
  opts.custom_data = json::parse(R"({"source":"test","n":2})");
  auto listener = test::connect();
  listener.listen(db::notify_channel(queue_of(d)));
  auto res = env.bus.create_batch(d, cmds, opts);
  EXPECT_EQ(res.batch_id.to_string(), opts.batch_id->to_string());
  EXPECT_EQ(res.total_commands, 3);
  ASSERT_EQ(res.command_results.size(), 3u);

  auto batch = env.bus.get_batch(d, res.batch_id);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->domain, d);
  EXPECT_EQ(batch->status, batch_status::pending);
  EXPECT_EQ(batch->batch_type, "COMMAND");
  EXPECT_EQ(batch->total_count, 3);
  EXPECT_EQ(batch->completed_count, 0);
  EXPECT_EQ(batch->failed_count, 0);
  EXPECT_EQ(batch->canceled_count, 0);
  EXPECT_EQ(batch->in_troubleshooting_count, 0);
  EXPECT_EQ(batch->name, opt_str{"month-end run"});
  ASSERT_TRUE(batch->custom_data);
  EXPECT_EQ(jsonb_text(env.conn, batch->custom_data->text()),
            jsonb_text(env.conn, R"({"source":"test","n":2})"));
  EXPECT_FALSE(batch->started_at);
  EXPECT_FALSE(batch->completed_at);
  EXPECT_EQ(env.conn
              .query("SELECT custom_data = $2::jsonb FROM commandbus.batch "
                     "WHERE domain = $1",
                     d, std::string{R"({"n":2,"source":"test"})"})
              .opt_text(0, 0),
            "t");

  for (size_t i = 0; i < cmds.size(); ++i) {
    EXPECT_EQ(res.command_results[i].command_id.to_string(),
              cmds[i].command_id.to_string());
    auto row = read_row(env.conn, d, cmds[i].command_id);
    ASSERT_TRUE(row) << i;
    EXPECT_EQ(row->batch_id, opt_str{res.batch_id.to_string()});
    EXPECT_EQ(row->status, "PENDING");
    EXPECT_EQ(row->command_type, cmds[i].command_type);
    EXPECT_EQ(row->msg_id,
              std::optional<int64_t>{res.command_results[i].msg_id});
    auto msg = read_message(env.conn, queue_of(d), res.command_results[i].msg_id);
    ASSERT_TRUE(msg) << i;
    EXPECT_EQ(msg->command_id, opt_str{cmds[i].command_id.to_string()});
    EXPECT_EQ(msg->domain, opt_str{d});
    EXPECT_EQ(msg->data, jsonb_text(env.conn, cmds[i].data.text()));
    auto audit = read_sent(env.conn, d, cmds[i].command_id);
    EXPECT_EQ(audit.count, 1);
    EXPECT_EQ(audit.batch_id, opt_str{res.batch_id.to_string()});
    EXPECT_EQ(audit.keys,
              "batch_id,command_type,correlation_id,msg_id,reply_to");
  }
  EXPECT_EQ(read_row(env.conn, d, cmds[0].command_id)->max_attempts, 3);
  EXPECT_EQ(read_row(env.conn, d, cmds[1].command_id)->max_attempts, 8);
  EXPECT_EQ(read_row(env.conn, d, cmds[2].command_id)->reply_queue,
            d + "__replies");
  EXPECT_TRUE(queue_exists(env.conn, d + "__replies"));
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 3);
  auto got = collect_notifications(listener, 1);
  auto more = listener.wait_for_notifications(300ms);
  got.insert(got.end(), more.begin(), more.end());
  EXPECT_EQ(got.size(), 1u);
}

TEST_P(BusCreateBatch, GeneratesBatchIdWhenNoneGiven) {
  bus_env env;
  auto d = test::unique_name("bcb");
  auto r1 = env.bus.create_batch(d, {make_cmd()});
  auto r2 = env.bus.create_batch(d, {make_cmd()});
  EXPECT_FALSE(r1.batch_id.is_nil());
  EXPECT_NE(r1.batch_id.to_string(), r2.batch_id.to_string());
  auto b = env.bus.get_batch(d, r1.batch_id);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->total_count, 1);
  EXPECT_FALSE(b->name);
  EXPECT_FALSE(b->custom_data);
}

TEST_P(BusCreateBatch, DuplicateWithinListRollsBackEverything) {
  bus_env env;
  auto d = test::unique_name("bcb");
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  cmds[2].command_id = cmds[0].command_id;
  create_batch_options opts;
  opts.batch_id = uuid::random();
  try {
    env.bus.create_batch(d, cmds, opts);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), cmds[0].command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_FALSE(env.bus.get_batch(d, *opts.batch_id));
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
}

TEST_P(BusCreateBatch, DuplicateAgainstDatabaseRollsBackEverything) {
  bus_env env;
  auto d = test::unique_name("bcb");
  auto existing = make_req(d);
  env.bus.send(existing);
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  cmds[1].command_id = existing.command_id;
  create_batch_options opts;
  opts.batch_id = uuid::random();
  try {
    env.bus.create_batch(d, cmds, opts);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_FALSE(env.bus.get_batch(d, *opts.batch_id));
  EXPECT_EQ(command_rows(env.conn, d), 1);
  EXPECT_FALSE(command_row_exists(env.conn, d, cmds[0].command_id));
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);
  EXPECT_EQ(audit_rows(env.conn, d), 1);
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM commandbus.batch WHERE domain = $1",
                     d)
              .int64(0, 0),
            0);
}

TEST_P(BusCreateBatch, EmptyListIsAnError) {
  bus_env env;
  auto d = test::unique_name("bcb");
  EXPECT_THROW(env.bus.create_batch(d, {}), command_bus_error);
  auto conn = test::connect();
  EXPECT_THROW(env.bus.create_batch(d, {}, {}, conn), command_bus_error);
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM commandbus.batch WHERE domain = $1",
                     d)
              .int64(0, 0),
            0);
}

TEST_P(BusCreateBatch, ExistingBatchIdIsAnErrorAndNothingWritten) {
  bus_env env;
  auto d = test::unique_name("bcb");
  auto first = env.bus.create_batch(d, {make_cmd(), make_cmd()});
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  create_batch_options opts;
  opts.batch_id = first.batch_id;
  opts.name = "again";
  bool duplicate_command = false;
  try {
    env.bus.create_batch(d, cmds, opts);
    FAIL() << "expected command_bus_error";
  } catch (const duplicate_command_error&) {
    duplicate_command = true;
  } catch (const command_bus_error& e) {
    EXPECT_NE(std::string{e.what()}.find(first.batch_id.to_string()),
              std::string::npos)
      << e.what();
  }
  EXPECT_FALSE(duplicate_command) << "an existing batch is not a duplicate "
                                     "command";
  auto b = env.bus.get_batch(d, first.batch_id);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->total_count, 2);
  EXPECT_FALSE(b->name);
  EXPECT_EQ(command_rows(env.conn, d), 2);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 2);
  EXPECT_EQ(audit_rows(env.conn, d), 2);
  for (auto& c : cmds)
    EXPECT_FALSE(command_row_exists(env.conn, d, c.command_id));
}

TEST_P(BusCreateBatch, GetBatchIsDomainScopedAndNulloptForUnknown) {
  bus_env env;
  auto d = test::unique_name("bcb");
  auto other = test::unique_name("bcb");
  auto res = env.bus.create_batch(d, {make_cmd()});
  EXPECT_TRUE(env.bus.get_batch(d, res.batch_id));
  EXPECT_FALSE(env.bus.get_batch(other, res.batch_id));
  EXPECT_FALSE(env.bus.get_batch(d, uuid::random()));
}

TEST_P(BusCreateBatch, ListBatchesFiltersPagesAndScopes) {
  bus_env env;
  auto d = test::unique_name("bcl");
  auto other = test::unique_name("bcl");
  std::vector<uuid> ids;
  for (int i = 0; i < 3; ++i) {
    create_batch_options o;
    o.name = "batch " + std::to_string(i);
    ids.push_back(env.bus.create_batch(d, {make_cmd()}, o).batch_id);
    env.conn.query("UPDATE commandbus.batch SET created_at = $3::timestamptz "
                   "WHERE domain = $1 AND batch_id = $2::uuid",
                   d, ids.back().to_string(),
                   "2001-02-03 04:05:0" + std::to_string(i + 1) + "+00");
  }
  env.bus.create_batch(other, {make_cmd()});
  env.conn.query("UPDATE commandbus.batch SET status = 'COMPLETED' WHERE "
                 "domain = $1 AND batch_id = $2::uuid",
                 d, ids[1].to_string());
  auto names = [](const std::vector<batch_metadata>& xs) {
    std::vector<std::string> out;
    for (auto& x : xs)
      out.push_back(x.name.value_or("?"));
    return out;
  };
  using v = std::vector<std::string>;
  EXPECT_EQ(names(env.bus.list_batches(d)),
            (v{"batch 2", "batch 1", "batch 0"}));
  EXPECT_EQ(names(env.bus.list_batches(d, batch_status::completed)),
            (v{"batch 1"}));
  EXPECT_EQ(names(env.bus.list_batches(d, batch_status::pending)),
            (v{"batch 2", "batch 0"}));
  EXPECT_TRUE(env.bus.list_batches(d, batch_status::in_progress).empty());
  EXPECT_EQ(names(env.bus.list_batches(d, std::nullopt, 1, 1)), (v{"batch 1"}));
  EXPECT_EQ(names(env.bus.list_batches(d, std::nullopt, 2, 0)),
            (v{"batch 2", "batch 1"}));
  EXPECT_TRUE(env.bus.list_batches(d, std::nullopt, 10, 3).empty());
  EXPECT_EQ(env.bus.list_batches(other).size(), 1u);
  EXPECT_TRUE(env.bus.list_batches(test::unique_name("bcl")).empty());
  auto first = env.bus.list_batches(d, batch_status::completed);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].batch_id.to_string(), ids[1].to_string());
  EXPECT_EQ(first[0].status, batch_status::completed);
}

TEST_P(BusCreateBatch, ListBatchCommandsFiltersAndEmptyForUnknown) {
  bus_env env;
  auto d = test::unique_name("bcc");
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  auto res = env.bus.create_batch(d, cmds);
  auto other = env.bus.create_batch(d, {make_cmd()});
  env.bus.send(make_req(d)); // not in a batch
  auto all = env.bus.list_batch_commands(d, res.batch_id);
  ASSERT_EQ(all.size(), 3u);
  std::set<std::string> expected, got;
  for (auto& c : cmds)
    expected.insert(c.command_id.to_string());
  for (auto& m : all) {
    got.insert(m.command_id.to_string());
    ASSERT_TRUE(m.batch_id);
    EXPECT_EQ(m.batch_id->to_string(), res.batch_id.to_string());
  }
  EXPECT_EQ(got, expected);
  set_status(env.conn, d, cmds[1].command_id, "COMPLETED");
  auto done = env.bus.list_batch_commands(d, res.batch_id,
                                          command_status::completed);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].command_id.to_string(), cmds[1].command_id.to_string());
  EXPECT_EQ(done[0].status, command_status::completed);
  EXPECT_EQ(env.bus.list_batch_commands(d, res.batch_id, command_status::pending)
              .size(),
            2u);
  EXPECT_EQ(env.bus.list_batch_commands(d, res.batch_id, std::nullopt, 2, 0)
              .size(),
            2u);
  EXPECT_EQ(env.bus.list_batch_commands(d, res.batch_id, std::nullopt, 2, 2)
              .size(),
            1u);
  EXPECT_EQ(env.bus.list_batch_commands(d, other.batch_id).size(), 1u);
  EXPECT_TRUE(env.bus.list_batch_commands(d, uuid::random()).empty());
  EXPECT_TRUE(
    env.bus.list_batch_commands(test::unique_name("bcc"), res.batch_id).empty());
}

// ============================================================================
// outbox: the caller's connection and transaction (§2.6)
// ============================================================================

TEST_P(BusOutbox, SendRollbackLeavesNothing) {
  bus_env env;
  auto d = test::unique_name("bo");
  auto conn = test::connect();
  auto req = make_req(d);
  {
    db::transaction tx{conn};
    auto res = env.bus.send(req, conn);
    EXPECT_GT(res.msg_id, 0);
    // Visible inside the transaction, invisible outside.
    EXPECT_TRUE(command_row_exists(conn, d, req.command_id));
    EXPECT_FALSE(command_row_exists(env.conn, d, req.command_id));
    EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  } // rollback
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  // The queue was created outside the caller's transaction and survives.
  EXPECT_TRUE(queue_exists(env.conn, queue_of(d)));
  // The id can be sent again after the rollback.
  EXPECT_NO_THROW(env.bus.send(req, conn));
  EXPECT_TRUE(command_row_exists(env.conn, d, req.command_id));
}

TEST_P(BusOutbox, SendCommitKeepsAllThree) {
  bus_env env;
  auto d = test::unique_name("bo");
  auto conn = test::connect();
  auto req = make_req(d);
  conn.exec("CREATE TEMP TABLE business (x int)");
  {
    db::transaction tx{conn};
    conn.exec("INSERT INTO business VALUES (1)");
    env.bus.send(req, conn);
    tx.commit();
  }
  EXPECT_EQ(conn.exec("SELECT count(*) FROM business").int64(0, 0), 1);
  EXPECT_TRUE(command_row_exists(env.conn, d, req.command_id));
  EXPECT_EQ(read_sent(env.conn, d, req.command_id).count, 1);
  EXPECT_EQ(messages_for(env.conn, d, req.command_id), 1);
}

TEST_P(BusOutbox, SendBatchOnCallersTransaction) {
  bus_env env{4, chunked(2)};
  auto d = test::unique_name("bo");
  auto conn = test::connect();
  std::vector<send_request> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(make_req(d));
  {
    db::transaction tx{conn};
    auto res = env.bus.send_batch(reqs, conn);
    EXPECT_EQ(res.chunks_processed, 3);
    EXPECT_EQ(res.total_commands, 5);
    EXPECT_TRUE(conn.in_transaction());
  }
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  {
    db::transaction tx{conn};
    auto res = env.bus.send_batch(reqs, conn);
    EXPECT_EQ(res.total_commands, 5);
    tx.commit();
  }
  EXPECT_EQ(command_rows(env.conn, d), 5);
  EXPECT_EQ(audit_rows(env.conn, d), 5);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 5);
}

// On a connection outside any transaction, each chunk is still one
// transaction: a duplicate in a chunk's second domain leaves nothing of that
// chunk, while the chunk before it stays committed.
TEST_P(BusOutbox, ChunkOnConnectionWithoutTransactionIsAtomic) {
  bus_env env{4, chunked(4)};
  auto a = test::unique_name("bo");
  auto b = test::unique_name("bo");
  auto taken = make_req(b);
  env.bus.send(taken);
  auto conn = test::connect();
  std::vector<send_request> reqs{make_req(a), make_req(a), make_req(b),
                                 make_req(b), // chunk 1
                                 make_req(a), make_req(a), make_req(b)};
  reqs.push_back(taken); // chunk 2: its 4th command exists already
  reqs.back().command_id = taken.command_id;
  EXPECT_THROW(env.bus.send_batch(reqs, conn), duplicate_command_error);
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(command_rows(env.conn, a), 2);
  EXPECT_EQ(command_rows(env.conn, b), 3);
  EXPECT_EQ(queue_length(env.conn, queue_of(a)), 2);
  EXPECT_EQ(queue_length(env.conn, queue_of(b)), 3);
  EXPECT_EQ(audit_rows(env.conn, a), 2);
  EXPECT_EQ(audit_rows(env.conn, b), 3);
}

TEST_P(BusOutbox, CreateBatchOnCallersTransaction) {
  bus_env env;
  auto d = test::unique_name("bo");
  auto conn = test::connect();
  std::vector<batch_command> cmds{make_cmd(), make_cmd()};
  create_batch_options opts;
  opts.batch_id = uuid::random();
  {
    db::transaction tx{conn};
    auto res = env.bus.create_batch(d, cmds, opts, conn);
    EXPECT_EQ(res.total_commands, 2);
    EXPECT_TRUE(conn.in_transaction());
  }
  EXPECT_FALSE(env.bus.get_batch(d, *opts.batch_id));
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  {
    db::transaction tx{conn};
    env.bus.create_batch(d, cmds, opts, conn);
    tx.commit();
  }
  auto b = env.bus.get_batch(d, *opts.batch_id);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->total_count, 2);
  EXPECT_EQ(command_rows(env.conn, d), 2);
  EXPECT_EQ(audit_rows(env.conn, d), 2);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 2);
}

TEST_P(BusOutbox, NotificationOnlyWhenCallerCommits) {
  bus_env env;
  auto d = test::unique_name("bo");
  auto listener = test::connect();
  listener.listen(db::notify_channel(queue_of(d)));
  auto conn = test::connect();
  {
    db::transaction tx{conn};
    env.bus.send(make_req(d), conn);
    EXPECT_TRUE(listener.wait_for_notifications(300ms).empty());
  } // rollback: never delivered
  EXPECT_TRUE(listener.wait_for_notifications(300ms).empty());
  {
    db::transaction tx{conn};
    env.bus.send(make_req(d), conn);
    env.bus.send_batch({make_req(d), make_req(d)}, conn);
    EXPECT_TRUE(listener.wait_for_notifications(300ms).empty());
    tx.commit();
  }
  auto got = collect_notifications(listener, 1);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], "pgmq_notify_" + queue_of(d));
}

// ============================================================================
// reads
// ============================================================================

TEST(BusRead, GetCommandReturnsFullMetadata) {
  bus_env env;
  auto d = test::unique_name("bg");
  auto req = make_req(d, "Transfer");
  req.correlation_id = uuid::random();
  req.reply_to = d + "__replies";
  req.max_attempts = 4;
  auto before = std::chrono::system_clock::now();
  auto res = env.bus.send(req);
  auto after = std::chrono::system_clock::now();
  auto m = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->domain, d);
  EXPECT_EQ(m->command_id.to_string(), req.command_id.to_string());
  EXPECT_EQ(m->command_type, "Transfer");
  EXPECT_EQ(m->status, command_status::pending);
  EXPECT_EQ(m->attempts, 0);
  EXPECT_EQ(m->max_attempts, 4);
  EXPECT_EQ(m->msg_id, std::optional<int64_t>{res.msg_id});
  ASSERT_TRUE(m->correlation_id);
  EXPECT_EQ(m->correlation_id->to_string(), req.correlation_id->to_string());
  EXPECT_EQ(m->reply_to, opt_str{d + "__replies"});
  EXPECT_FALSE(m->last_error_type);
  EXPECT_FALSE(m->last_error_code);
  EXPECT_FALSE(m->last_error_msg);
  EXPECT_FALSE(m->batch_id);
  EXPECT_EQ(m->created_at, m->updated_at);
  EXPECT_GE(m->created_at, before - 60s);
  EXPECT_LE(m->created_at, after + 60s);
  // Stored error fields are mapped.
  env.conn.query("UPDATE commandbus.command SET status = "
                 "'IN_TROUBLESHOOTING_QUEUE', attempts = 4, last_error_type = "
                 "'PERMANENT', last_error_code = 'E42', last_error_msg = 'boom' "
                 "WHERE domain = $1 AND command_id = $2::uuid",
                 d, req.command_id.to_string());
  m = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, command_status::in_troubleshooting_queue);
  EXPECT_EQ(m->attempts, 4);
  EXPECT_EQ(m->last_error_type, opt_str{"PERMANENT"});
  EXPECT_EQ(m->last_error_code, opt_str{"E42"});
  EXPECT_EQ(m->last_error_msg, opt_str{"boom"});
}

TEST(BusRead, GetCommandAndExistsForUnknown) {
  bus_env env;
  auto d = test::unique_name("bg");
  auto req = make_req(d);
  env.bus.send(req);
  EXPECT_TRUE(env.bus.command_exists(d, req.command_id));
  EXPECT_FALSE(env.bus.command_exists(d, uuid::random()));
  EXPECT_FALSE(env.bus.command_exists(test::unique_name("bg"), req.command_id));
  EXPECT_FALSE(env.bus.get_command(d, uuid::random()));
  EXPECT_FALSE(env.bus.get_command(test::unique_name("bg"), req.command_id));
}

namespace {

/// Five commands in a fresh domain with fixed created_at 2001-01-01
/// 00:00:0{1..5} (index 0..4), types A A B B C (unique per test) and
/// statuses PENDING COMPLETED PENDING COMPLETED FAILED.
struct query_fixture {
  explicit query_fixture(bus_env& env)
    : domain(test::unique_name("bqq")),
      type_a(test::unique_name("TA")),
      type_b(test::unique_name("TB")),
      type_c(test::unique_name("TC")) {
    std::vector<std::string> types{type_a, type_a, type_b, type_b, type_c};
    std::vector<std::string> statuses{"PENDING", "COMPLETED", "PENDING",
                                      "COMPLETED", "FAILED"};
    for (size_t i = 0; i < 5; ++i) {
      auto req = make_req(domain, types[i]);
      env.bus.send(req);
      set_status(env.conn, domain, req.command_id, statuses[i]);
      set_created_at(env.conn, domain, req.command_id,
                     "2001-01-01 00:00:0" + std::to_string(i + 1) + "+00");
      ids.push_back(req.command_id.to_string());
      auto m = env.bus.get_command(domain, req.command_id);
      created.push_back(m->created_at);
    }
  }
  std::vector<std::string> pick(std::initializer_list<size_t> idx) const {
    std::vector<std::string> out;
    for (auto i : idx)
      out.push_back(ids[i]);
    return out;
  }
  std::string domain, type_a, type_b, type_c;
  std::vector<std::string> ids;
  std::vector<timestamp> created;
};

} // namespace

TEST(BusQuery, ByDomainNewestFirst) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.domain = f.domain;
  auto got = env.bus.query_commands(q);
  EXPECT_EQ(ids_of(got), f.pick({4, 3, 2, 1, 0}));
  for (size_t i = 1; i < got.size(); ++i)
    EXPECT_GE(got[i - 1].created_at, got[i].created_at);
  EXPECT_EQ(format_timestamp(f.created[0]), "2001-01-01T00:00:01.000000Z");
}

TEST(BusQuery, ByStatus) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.domain = f.domain;
  q.status = command_status::completed;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({3, 1}));
  q.status = command_status::failed;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({4}));
  q.status = command_status::canceled;
  EXPECT_TRUE(env.bus.query_commands(q).empty());
  // Status alone (all domains): every row has it and ours are included.
  command_query only;
  only.status = command_status::failed;
  only.limit = 100000;
  auto all = env.bus.query_commands(only);
  for (auto& m : all)
    EXPECT_EQ(m.status, command_status::failed);
  auto ids = ids_of(all);
  EXPECT_NE(std::find(ids.begin(), ids.end(), f.ids[4]), ids.end());
}

TEST(BusQuery, ByCommandTypeAndCombined) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.command_type = f.type_a; // unique type: no domain needed
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({1, 0}));
  q.command_type = f.type_b;
  q.status = command_status::pending;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({2}));
  q.domain = f.domain;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({2}));
  q.domain = test::unique_name("bqq");
  EXPECT_TRUE(env.bus.query_commands(q).empty());
  command_query c;
  c.domain = f.domain;
  c.command_type = f.type_c;
  c.status = command_status::failed;
  EXPECT_EQ(ids_of(env.bus.query_commands(c)), f.pick({4}));
}

TEST(BusQuery, LimitAndOffsetPage) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.domain = f.domain;
  q.limit = 2;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({4, 3}));
  q.offset = 2;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({2, 1}));
  q.offset = 4;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({0}));
  q.offset = 5;
  EXPECT_TRUE(env.bus.query_commands(q).empty());
  q.offset = 0;
  q.limit = 0;
  EXPECT_TRUE(env.bus.query_commands(q).empty());
}

TEST(BusQuery, CreatedRangeIsInclusive) {
  bus_env env;
  query_fixture f{env};
  command_query q;
  q.domain = f.domain;
  q.created_after = f.created[1];
  q.created_before = f.created[3];
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({3, 2, 1}));
  q.created_after = f.created[4];
  q.created_before = std::nullopt;
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({4}));
  q.created_after = std::nullopt;
  q.created_before = f.created[0];
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({0}));
  q.created_after = f.created[2];
  q.created_before = f.created[2];
  EXPECT_EQ(ids_of(env.bus.query_commands(q)), f.pick({2}));
  // One microsecond past the newest: nothing.
  q.created_after = f.created[4] + std::chrono::microseconds{1};
  q.created_before = std::nullopt;
  EXPECT_TRUE(env.bus.query_commands(q).empty());
}

TEST(BusQuery, EmptyResult) {
  bus_env env;
  command_query q;
  q.domain = test::unique_name("bqq");
  EXPECT_TRUE(env.bus.query_commands(q).empty());
  q.domain = std::nullopt;
  q.command_type = test::unique_name("Nope");
  EXPECT_TRUE(env.bus.query_commands(q).empty());
}

TEST(BusAudit, SentAfterSend) {
  bus_env env;
  auto d = test::unique_name("ba");
  auto req = make_req(d, "Pay");
  req.correlation_id = uuid::random();
  auto res = env.bus.send(req);
  auto trail = env.bus.get_audit_trail(req.command_id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "SENT");
  EXPECT_EQ(trail[0].domain, d);
  EXPECT_EQ(trail[0].command_id.to_string(), req.command_id.to_string());
  EXPECT_GT(trail[0].audit_id, 0);
  ASSERT_TRUE(trail[0].details);
  auto expected = env.conn.query(
    "SELECT jsonb_build_object('command_type', 'Pay', 'correlation_id', "
    "$1::text, 'reply_to', NULL, 'msg_id', $2::bigint, 'batch_id', NULL)::text",
    req.correlation_id->to_string(), res.msg_id);
  EXPECT_EQ(jsonb_text(env.conn, trail[0].details->text()),
            std::string{expected.text(0, 0)});
}

TEST(BusAudit, OrderedByTsThenAuditIdAndDomainFiltered) {
  bus_env env;
  auto d = test::unique_name("ba");
  auto other = test::unique_name("ba");
  auto req = make_req(d);
  env.bus.send(req);
  auto twin = make_req(other);
  twin.command_id = req.command_id;
  env.bus.send(twin);
  // LATE has the newest ts but the lowest of the new audit ids; TIE1/TIE2
  // share one ts (one transaction) and must follow their audit ids.
  env.conn.exec("BEGIN");
  env.conn.query("INSERT INTO commandbus.audit (domain, command_id, "
                 "event_type, ts) VALUES ($1, $2::uuid, 'LATE', NOW() + "
                 "interval '1 hour')",
                 d, req.command_id.to_string());
  env.conn.query("INSERT INTO commandbus.audit (domain, command_id, "
                 "event_type) VALUES ($1, $2::uuid, 'TIE1')",
                 d, req.command_id.to_string());
  env.conn.query("INSERT INTO commandbus.audit (domain, command_id, "
                 "event_type) VALUES ($1, $2::uuid, 'TIE2')",
                 d, req.command_id.to_string());
  env.conn.exec("COMMIT");
  auto types = [](const std::vector<audit_event>& xs) {
    std::vector<std::string> out;
    for (auto& x : xs)
      out.push_back(x.event_type);
    return out;
  };
  using v = std::vector<std::string>;
  auto trail = env.bus.get_audit_trail(req.command_id, d);
  EXPECT_EQ(types(trail), (v{"SENT", "TIE1", "TIE2", "LATE"}));
  ASSERT_EQ(trail.size(), 4u);
  EXPECT_EQ(trail[1].ts, trail[2].ts);
  EXPECT_LT(trail[1].audit_id, trail[2].audit_id);
  EXPECT_FALSE(trail[1].details);
  for (auto& ev : trail)
    EXPECT_EQ(ev.domain, d);
  auto in_other = env.bus.get_audit_trail(req.command_id, other);
  EXPECT_EQ(types(in_other), (v{"SENT"}));
  EXPECT_EQ(in_other[0].domain, other);
  EXPECT_EQ(env.bus.get_audit_trail(req.command_id).size(), 5u);
  EXPECT_TRUE(env.bus.get_audit_trail(req.command_id, test::unique_name("ba"))
                .empty());
}

TEST(BusAudit, UnknownIdGivesEmptyTrail) {
  bus_env env;
  EXPECT_TRUE(env.bus.get_audit_trail(uuid::random()).empty());
  EXPECT_TRUE(env.bus.get_audit_trail(uuid::random(), std::string{"x"}).empty());
}

// ============================================================================
// thread safety
// ============================================================================

namespace {

void send_from_threads(bus_env& env, const std::string& d, int threads,
                       int per_thread) {
  start_gate gate{threads};
  std::mutex mtx;
  std::vector<std::string> errors;
  std::set<int64_t> msg_ids;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      gate.arrive_and_wait();
      for (int i = 0; i < per_thread; ++i) {
        try {
          auto res = env.bus.send(make_req(d));
          std::lock_guard<std::mutex> guard{mtx};
          msg_ids.insert(res.msg_id);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> guard{mtx};
          errors.push_back(e.what());
        }
      }
    });
  for (auto& t : ts)
    t.join();
  EXPECT_TRUE(errors.empty()) << errors.size() << " failed sends, first: "
                              << (errors.empty() ? "" : errors.front());
  auto total = static_cast<int64_t>(threads) * per_thread;
  EXPECT_EQ(static_cast<int64_t>(msg_ids.size()), total);
  EXPECT_EQ(command_rows(env.conn, d), total);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), total);
  EXPECT_EQ(audit_rows(env.conn, d), total);
}

} // namespace

TEST(BusThreads, ManyThreadsOneBusSmallPool) {
  // Pool smaller than the thread count; the first sends also create the
  // queue on demand.
  bus_env env{3, {}, 3s};
  send_from_threads(env, test::unique_name("bt"), 8, 15);
  EXPECT_LE(env.pool.size(), 3u);
}

TEST(BusThreads, ManyThreadsOneBusQueueExists) {
  bus_env env{3, {}, 3s};
  auto d = test::unique_name("bt");
  env.bus.ensure_queue(queue_of(d));
  send_from_threads(env, d, 8, 15);
  EXPECT_LE(env.pool.size(), 3u);
}

// Concurrent sends through one bus may be combined into one transaction:
// each caller must still get exactly its own outcome (a duplicate or an
// unknown batch fails only that caller, with its own ids).
TEST(BusThreads, CombinedSendsKeepEachCallersOutcome) {
  constexpr int threads = 8;
  constexpr int per_thread = 12;
  bus_env env{4, {}, 5s};
  auto d = test::unique_name("bt");
  std::vector<uuid> existing;
  for (int i = 0; i < 3; ++i) {
    auto req = make_req(d);
    env.bus.send(req);
    existing.push_back(req.command_id);
  }
  struct outcome {
    send_request req;
    std::optional<send_result> result;
    std::optional<uuid> duplicate_id;
    std::string duplicate_domain;
    std::optional<uuid> missing_batch;
    std::string other_error;
  };
  std::vector<std::vector<outcome>> outcomes(threads);
  start_gate gate{threads};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      auto& mine = outcomes[static_cast<size_t>(t)];
      for (int i = 0; i < per_thread; ++i) {
        outcome o;
        o.req = make_req(d, "T", "{\"t\":" + std::to_string(t) + "}");
        if (i % 4 == 1)
          o.req.command_id = existing[static_cast<size_t>((t + i) % 3)];
        if (i % 4 == 2)
          o.req.batch_id = uuid::random();
        mine.push_back(o);
      }
      gate.arrive_and_wait();
      for (auto& o : mine) {
        try {
          o.result = env.bus.send(o.req);
        } catch (const duplicate_command_error& e) {
          o.duplicate_id = e.command_id();
          o.duplicate_domain = e.domain();
        } catch (const batch_not_found_error& e) {
          o.missing_batch = e.batch_id();
        } catch (const std::exception& e) {
          o.other_error = e.what();
        }
      }
    });
  for (auto& t : ts)
    t.join();
  int64_t sent = 0;
  std::set<int64_t> msg_ids;
  for (auto& mine : outcomes)
    for (size_t i = 0; i < mine.size(); ++i) {
      auto& o = mine[i];
      EXPECT_EQ(o.other_error, "");
      if (i % 4 == 1) {
        ASSERT_TRUE(o.duplicate_id) << i;
        EXPECT_EQ(o.duplicate_id->to_string(), o.req.command_id.to_string());
        EXPECT_EQ(o.duplicate_domain, d);
      } else if (i % 4 == 2) {
        ASSERT_TRUE(o.missing_batch) << i;
        EXPECT_EQ(o.missing_batch->to_string(), o.req.batch_id->to_string());
        EXPECT_FALSE(command_row_exists(env.conn, d, o.req.command_id));
      } else {
        ASSERT_TRUE(o.result) << i;
        ++sent;
        msg_ids.insert(o.result->msg_id);
        EXPECT_EQ(o.result->command_id.to_string(),
                  o.req.command_id.to_string());
        auto row = read_row(env.conn, d, o.req.command_id);
        ASSERT_TRUE(row);
        EXPECT_EQ(row->msg_id, std::optional<int64_t>{o.result->msg_id});
        auto msg = read_message(env.conn, queue_of(d), o.result->msg_id);
        ASSERT_TRUE(msg);
        EXPECT_EQ(msg->command_id, opt_str{o.req.command_id.to_string()});
      }
    }
  EXPECT_EQ(static_cast<int64_t>(msg_ids.size()), sent);
  EXPECT_EQ(command_rows(env.conn, d), sent + 3);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), sent + 3);
  EXPECT_EQ(audit_rows(env.conn, d), sent + 3);
}

TEST_P(BusSendBatch, ParallelChunksKeepInputOrder) {
  command_bus_options opts;
  opts.chunk_size = 4;
  opts.parallel_chunks = 3;
  bus_env env{4, opts};
  auto d = test::unique_name("bsp");
  std::vector<send_request> reqs;
  for (int i = 0; i < 22; ++i)
    reqs.push_back(make_req(d));
  auto res = env.bus.send_batch(reqs);
  EXPECT_EQ(res.chunks_processed, 6);
  EXPECT_EQ(res.total_commands, 22);
  ASSERT_EQ(res.results.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(res.results[i].command_id.to_string(),
              reqs[i].command_id.to_string());
    auto msg = read_message(env.conn, queue_of(d), res.results[i].msg_id);
    ASSERT_TRUE(msg) << i;
    EXPECT_EQ(msg->command_id, opt_str{reqs[i].command_id.to_string()});
  }
  EXPECT_EQ(command_rows(env.conn, d), 22);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 22);
}

TEST_P(BusSendBatch, ParallelChunkFailureCommitsWholeChunksOnly) {
  // A duplicate in the second of six chunks, two at once: the call fails
  // naming it, the failing chunk wrote nothing and the others committed
  // whole or not at all (which ones ran beside it depends on timing).
  command_bus_options opts;
  opts.chunk_size = 4;
  opts.parallel_chunks = 2;
  bus_env env{4, opts};
  auto d = test::unique_name("bsf");
  std::vector<send_request> reqs;
  for (int i = 0; i < 24; ++i)
    reqs.push_back(make_req(d));
  auto existing = reqs[5];
  env.bus.send(existing);
  try {
    env.bus.send_batch(reqs);
    FAIL() << "the duplicate was not reported";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
  }
  auto sent = command_rows(env.conn, d) - 1;
  EXPECT_EQ(sent % 4, 0) << sent;
  EXPECT_LE(sent, 20);
  for (int i = 4; i < 8; ++i)
    if (i != 5)
      EXPECT_FALSE(command_row_exists(env.conn, d,
                                      reqs[static_cast<size_t>(i)].command_id))
        << i;
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), sent + 1);
  EXPECT_EQ(audit_rows(env.conn, d), sent + 1);
}

// Two send_batch calls race on the same new command id: the loser fails on
// the unique index (23505) and must name the command that is the duplicate.
TEST_P(BusSendBatch, RacingDuplicateNamesTheDuplicateCommand) {
  bus_env env;
  auto d = test::unique_name("bsr");
  auto shared = make_req(d);
  auto first_a = make_req(d);
  auto first_b = make_req(d);
  env.bus.ensure_queue(queue_of(d));
  auto holder = test::connect();
  db::transaction tx{holder};
  env.bus.send_batch({first_a, shared}, holder); // uncommitted
  std::optional<uuid> dup_id;
  std::string dup_domain, other;
  std::thread loser{[&] {
    try {
      env.bus.send_batch({first_b, shared});
      other = "no error";
    } catch (const duplicate_command_error& e) {
      dup_id = e.command_id();
      dup_domain = e.domain();
    } catch (const std::exception& e) {
      other = e.what();
    }
  }};
  // Wait (bounded, by polling the server) until the loser blocks on the
  // holder's uncommitted row.
  bool blocked = false;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!blocked && std::chrono::steady_clock::now() < deadline)
    blocked = env.conn
                .query("SELECT count(*) FROM pg_stat_activity WHERE "
                       "pg_blocking_pids(pid) @> ARRAY[$1::int]",
                       holder.backend_pid())
                .int64(0, 0)
              > 0;
  EXPECT_TRUE(blocked);
  tx.commit();
  loser.join();
  EXPECT_EQ(other, "");
  ASSERT_TRUE(dup_id);
  EXPECT_EQ(dup_id->to_string(), shared.command_id.to_string());
  EXPECT_EQ(dup_domain, d);
  EXPECT_FALSE(command_row_exists(env.conn, d, first_b.command_id));
  EXPECT_EQ(command_rows(env.conn, d), 2);
}

// Invalid input anywhere in the list writes nothing, also on the caller's
// connection (there each chunk would otherwise run before the next chunk is
// validated; without a caller transaction those statements commit).
TEST_P(BusSendBatch, InvalidRequestInLaterChunkWritesNothing) {
  bus_env env{4, chunked(2)};
  auto d = test::unique_name("bsi");
  std::vector<send_request> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(make_req(d));
  reqs[4].reply_to = "bad-queue";
  EXPECT_THROW(env.bus.send_batch(reqs), db::invalid_argument);
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  auto conn = test::connect();
  EXPECT_THROW(env.bus.send_batch(reqs, conn), db::invalid_argument);
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  // An empty command_type in the last chunk (fresh domain and ids).
  auto d2 = test::unique_name("bsi");
  std::vector<send_request> more;
  for (int i = 0; i < 5; ++i)
    more.push_back(make_req(d2));
  more[4].command_type = "";
  EXPECT_THROW(env.bus.send_batch(more, conn), command_bus_error);
  EXPECT_EQ(command_rows(env.conn, d2), 0);
}

// The SENT audit of a plain send has the reference's details keys, batch_id
// (null) included (rcmd.md §4 "send: null if none"), also when concurrent
// sends through one bus are combined into one transaction.
TEST(BusThreads, CombinedSendsKeepReferenceAuditDetails) {
  constexpr int threads = 8;
  bus_env env{4};
  auto d = test::unique_name("bta");
  env.bus.ensure_queue(queue_of(d));
  std::vector<std::vector<send_request>> reqs(threads);
  for (auto& mine : reqs)
    for (int i = 0; i < 10; ++i)
      mine.push_back(make_req(d));
  start_gate gate{threads};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      gate.arrive_and_wait();
      for (auto& req : reqs[static_cast<size_t>(t)])
        env.bus.send(req);
    });
  for (auto& t : ts)
    t.join();
  EXPECT_EQ(audit_rows(env.conn, d), threads * 10);
  auto r = env.conn.query(
    "SELECT count(*) FILTER (WHERE NOT details_json ? 'batch_id'), "
    "count(*) FILTER (WHERE (SELECT string_agg(k, ',' ORDER BY k) FROM "
    "jsonb_object_keys(details_json) AS k) = "
    "'batch_id,command_type,correlation_id,msg_id,reply_to') "
    "FROM commandbus.audit WHERE domain = $1 AND event_type = 'SENT'",
    d);
  EXPECT_EQ(r.int64(0, 0), 0) << "SENT audits without a batch_id key";
  EXPECT_EQ(r.int64(0, 1), threads * 10);
}

// An unknown batch in the second domain of a multi-domain chunk is reported
// for that domain, and the whole chunk rolls back.
TEST_P(BusSendBatchId, UnknownBatchErrorNamesItsDomain) {
  bus_env env;
  auto a = test::unique_name("bka"); // sorts before b
  auto b = test::unique_name("bkb");
  auto batch = uuid::random();
  auto in_a = make_req(a);
  auto in_b = make_req(b);
  in_b.batch_id = batch;
  try {
    env.bus.send_batch({in_a, in_b});
    FAIL() << "expected batch_not_found_error";
  } catch (const batch_not_found_error& e) {
    EXPECT_EQ(e.batch_id().to_string(), batch.to_string());
    EXPECT_EQ(e.domain(), b);
  }
  EXPECT_EQ(command_rows(env.conn, a), 0);
  EXPECT_EQ(command_rows(env.conn, b), 0);
}
