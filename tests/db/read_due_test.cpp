// Reads in visibility order (sql/commandbus/V019, docs/performance.md
// "Reads"): cmdbus_read_due claims like pgmq.read, takes the messages
// visible the longest first, and never walks the messages it cannot take
// (held by other reads, delayed, waiting for a retry's backoff), which a
// read in msg_id order steps over on every read. The same holds for the
// oldest-first rounds of the priority, cap and shard read (cmdbus_read,
// V020).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "cmdbus/db/transaction.hpp"
#include "cmdbus/db/worker_store.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

// Sends `n` empty messages to `queue`, visible after `delay_s` seconds;
// returns their msg_ids in order.
std::vector<int64_t> send_n(db::connection& conn, const std::string& queue,
                            int n, int delay_s = 0) {
  auto r = conn.query(
    "SELECT * FROM pgmq.send_batch($1, ARRAY(SELECT '{}'::jsonb FROM "
    "generate_series(1, $2::int)), $3::int)",
    queue, std::to_string(n), std::to_string(delay_s));
  std::vector<int64_t> ids;
  for (int i = 0; i < r.rows(); ++i)
    ids.push_back(r.int64(i, 0));
  return ids;
}

// The shared buffers (hit or read) that `sql` touched when run once,
// measured by EXPLAIN ANALYZE inside a transaction that is rolled back (so
// that what it claims stays visible). Run twice, the second run measured:
// the first one in a session also reads the catalog (the function's
// compilation, the table's metadata).
int64_t buffers_of(db::connection& conn, const std::string& sql,
                   const std::string& queue) {
  {
    db::transaction warm{conn};
    conn.query(sql, queue);
  }
  db::transaction tx{conn};
  auto r = conn.query("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, queue);
  rapidjson::Document doc;
  doc.Parse(r.text(0, 0).data(), r.text(0, 0).size());
  const auto& plan = doc[0]["Plan"];
  return plan["Shared Hit Blocks"].GetInt64()
         + plan["Shared Read Blocks"].GetInt64();
}

const std::string read_due
  = "SELECT * FROM commandbus.cmdbus_read_due($1, 30, 10)";

// The buffers a read of 10 due messages touches with `ahead` messages it
// cannot take ahead of them (in msg_id order): delayed by a day, or (held)
// read and held by another worker. A read in msg_id order that filters on
// vt steps over every one of them (some 100 rows per heap page, each held
// row on a page of its own); a read in vt order only descends deeper
// indexes and skips the held rows' dead index entries.
int64_t cost_with_ahead(bus_env& e, int ahead, bool held,
                        const std::string& read = read_due) {
  auto queue = unique_name("rd");
  e.bus.ensure_queue(queue);
  // Held: sent, and the planner believes every message is visible (as it
  // is during a backlog), then taken by another worker's read. Delayed:
  // sent with a delay of a day, as a delayed send writes them.
  send_n(e.conn, queue, ahead, held ? 0 : 86400);
  send_n(e.conn, queue, 10);
  if (held) {
    e.conn.query("ANALYZE pgmq.q_" + queue);
    e.conn.query("SELECT count(*) FROM pgmq.read($1, 300, $2::int)", queue,
                 std::to_string(ahead));
  }
  auto cost = buffers_of(e.conn, read, queue);
  EXPECT_EQ(e.conn
              .query("SELECT count(*) FROM commandbus.cmdbus_read_due($1, "
                     "30, 100)",
                     queue)
              .int64(0, 0),
            10)
    << "the due ones, all of them";
  return cost;
}

} // namespace

TEST(ReadDue, TakesTheMessagesVisibleTheLongestFirstAndClaimsLikePgmqRead) {
  bus_env e;
  auto queue = unique_name("rd");
  e.bus.ensure_queue(queue);
  auto ids = send_n(e.conn, queue, 3);
  ASSERT_EQ(ids.size(), 3u);
  // The newest message has been visible the longest, the middle one the
  // shortest.
  e.conn.query("UPDATE pgmq.q_" + queue
                 + " SET vt = now() - make_interval(mins => CASE msg_id "
                   "WHEN $1::bigint THEN 5 WHEN $2::bigint THEN 1 ELSE 10 "
                   "END)",
               std::to_string(ids[0]), std::to_string(ids[1]));
  auto r = e.conn.query(
    "SELECT msg_id, read_ct, vt > clock_timestamp() + interval '20 seconds' "
    "FROM commandbus.cmdbus_read_due($1, 30, 2)",
    queue);
  ASSERT_EQ(r.rows(), 2);
  // Rows in msg_id order, as pgmq.read returns them.
  EXPECT_EQ(r.int64(0, 0), ids[0]);
  EXPECT_EQ(r.int64(1, 0), ids[2]);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.int64(i, 1), 1) << "read_ct of row " << i;
    EXPECT_EQ(r.text(i, 2), "t") << "vt of row " << i;
  }
  // The one left is the next read's; nothing is visible after it.
  auto next = e.conn.query(
    "SELECT msg_id FROM commandbus.cmdbus_read_due($1, 30, 10)", queue);
  ASSERT_EQ(next.rows(), 1);
  EXPECT_EQ(next.int64(0, 0), ids[1]);
  EXPECT_EQ(
    e.conn
      .query("SELECT count(*) FROM commandbus.cmdbus_read_due($1, 30, 10)",
             queue)
      .int64(0, 0),
    0);
  EXPECT_EQ(
    e.conn
      .query("SELECT count(*) FROM commandbus.cmdbus_read_due($1, 30, 0)",
             queue)
      .int64(0, 0),
    0);
}

TEST(ReadDue, ARefusedQueueNameIsAnError) {
  bus_env e;
  EXPECT_THROW(e.conn.query("SELECT * FROM commandbus.cmdbus_read_due("
                            "'no such; queue', 30, 10)"),
               std::exception);
}

// Twenty and forty times as many messages ahead cost at most 200 buffers
// more (the indexes may be a level deeper; the held rows' dead index
// entries fill some leaf pages), where a read in msg_id order steps over
// every one of them (measured: 8,583 against 575 buffers held, 1,010
// against 334 delayed).
struct backlog {
  int few;
  int many;
  bool held;
};
constexpr backlog delayed{2000, 80000, false};
constexpr backlog held{300, 6000, true};

void expect_not_walked(bus_env& e, const backlog& ahead,
                       const std::string& read = read_due) {
  auto few = cost_with_ahead(e, ahead.few, ahead.held, read);
  auto many = cost_with_ahead(e, ahead.many, ahead.held, read);
  EXPECT_LE(many, few + 200) << read << "\n" << ahead.few << " ahead: " << few;
}

TEST(ReadDue, DoesNotWalkTheDelayedMessagesAheadOfTheDueOnes) {
  bus_env e;
  expect_not_walked(e, delayed);
}

TEST(ReadDue, DoesNotWalkTheMessagesOtherReadsHold) {
  bus_env e;
  expect_not_walked(e, held);
}

// cmdbus_read's oldest-first rounds: with a per-type cap (a type the
// messages do not have, so the cap cuts nothing), a shard, and a priority
// read whose whole read is its oldest-first share. Measured for the capped
// read before V020 (msg_id order, the cut a volatile function): 992
// against 125 buffers delayed, 8,281 against 443 held; after: 116 against
// 112, and 157 against 91.
const std::vector<std::string> oldest_first_reads = {
  "SELECT * FROM commandbus.cmdbus_read($1, 30, 10, ARRAY['Slow'], "
  "ARRAY[1])",
  "SELECT * FROM commandbus.cmdbus_read($1, 30, 10, p_shard_index => 0, "
  "p_shard_count => 1)",
  "SELECT * FROM commandbus.cmdbus_read($1, 30, 10, p_priority => true, "
  "p_oldest => 10)"};

TEST(ReadDue, CmdbusReadDoesNotWalkTheDelayedMessagesAheadOfTheDueOnes) {
  bus_env e;
  for (auto& read : oldest_first_reads)
    expect_not_walked(e, delayed, read);
}

TEST(ReadDue, CmdbusReadDoesNotWalkTheMessagesOtherReadsHold) {
  bus_env e;
  for (auto& read : oldest_first_reads)
    expect_not_walked(e, held, read);
}

TEST(ReadDue, TheWorkersReadsTakeTheDueCommandsPastADelayedBacklog) {
  bus_env e;
  auto domain = unique_name("rd");
  auto queue = domain + "__commands";
  e.bus.ensure_queue(queue);
  std::vector<uuid> later;
  for (int i = 0; i < 3; ++i) {
    auto req = make_req(domain, "Later");
    req.not_before = not_before_in(std::chrono::hours{24});
    later.push_back(e.bus.send(req).command_id);
  }
  auto now = e.bus.send(make_req(domain, "Now"));
  for (bool defer : {true, false}) {
    db::worker_store store{e.conn, domain};
    db::read_options how;
    how.defer_claims = defer;
    auto r = store.receive(30, 10, how);
    if (defer) {
      ASSERT_EQ(r.commands.size(), 1u);
      EXPECT_EQ(r.commands[0].cmd.command_id, now.command_id);
      // Visible again for the second read (the same function's sibling).
      e.conn.query("UPDATE pgmq.q_" + queue
                     + " SET vt = now() WHERE msg_id = $1::bigint",
                   std::to_string(r.commands[0].msg_id));
    } else {
      ASSERT_EQ(r.commands.size(), 1u);
      EXPECT_EQ(r.commands[0].cmd.command_id, now.command_id);
      EXPECT_EQ(status_of(e.conn, domain, now.command_id), "IN_PROGRESS");
    }
  }
  for (auto& id : later)
    EXPECT_EQ(status_of(e.conn, domain, id), "PENDING");
}
