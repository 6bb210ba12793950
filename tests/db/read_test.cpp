// The read that chooses which messages to take (commandbus.cmdbus_read and
// cmdbus_receive_read, sql/commandbus/V010) against a real PostgreSQL: it
// claims like pgmq.read (read_ct + 1, a new vt, the same row shape), takes
// the highest priority first with an oldest-first share, keeps per-type
// limits without touching the messages beyond them (no attempt burnt) and
// without letting a capped type's backlog hide the others, splits a queue
// into shards, skips rows other sessions hold, and refuses bad arguments.
// And the worker store's read with these options, priority ordered.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/text_format.hpp"
#include "cmdbus/db/worker_store.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

// A queue with messages inserted directly (pgmq.send).
struct read_env {
  read_env() : domain(unique_name("rd")), queue(db::command_queue(domain)) {
    env.bus.ensure_queue(queue);
  }

  db::connection& c() {
    return env.conn;
  }

  // Sends {"command_type": type} plus `extra` members; returns the msg_id.
  int64_t send(const std::string& type, const std::string& extra = "") {
    auto body = R"({"command_type":")" + type + "\""
                + (extra.empty() ? "" : "," + extra) + "}";
    return c()
      .query("SELECT pgmq.send($1, $2::jsonb)", queue, body)
      .int64(0, 0);
  }

  // msg_ids of one cmdbus_read, in the order returned. `args` is the text
  // after (queue, vt, qty, ...
  std::vector<int64_t> read(int qty, const std::string& args = "") {
    auto r = c().query("SELECT msg_id FROM commandbus.cmdbus_read($1, 30, "
                         + std::to_string(qty) + args + ")",
                       queue);
    std::vector<int64_t> out;
    for (int i = 0; i < r.rows(); ++i)
      out.push_back(r.int64(i, 0));
    return out;
  }

  int read_ct(int64_t msg_id) {
    return std::stoi(
      *scalar(c(), "SELECT read_ct FROM pgmq.q_" + queue + " WHERE msg_id = $1",
              msg_id));
  }

  bool visible(int64_t msg_id) {
    return *scalar(c(),
                   "SELECT (vt <= clock_timestamp())::text FROM pgmq.q_" + queue
                     + " WHERE msg_id = $1",
                   msg_id)
           == "true";
  }

  bus_env env;
  std::string domain;
  std::string queue;
};

} // namespace

TEST(CmdbusRead, WithoutOptionsClaimsLikePgmqRead) {
  read_env e;
  for (int i = 0; i < 5; ++i)
    e.send("A");
  auto r = e.c().query(
    "SELECT msg_id, read_ct, vt > clock_timestamp() + interval '20 seconds', "
    "message ->> 'command_type' FROM commandbus.cmdbus_read($1, 30, 3)",
    e.queue);
  ASSERT_EQ(r.rows(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.int64(i, 0), i + 1);
    EXPECT_EQ(r.int64(i, 1), 1);
    EXPECT_EQ(r.text(i, 2), "t");
    EXPECT_EQ(r.text(i, 3), "A");
  }
  // The same row shape as pgmq.read (pgmq.message_record).
  EXPECT_EQ(*scalar(e.c(),
                    "SELECT pg_get_function_result("
                    "'commandbus.cmdbus_read(text, integer, integer, text[], "
                    "integer[], integer, integer, boolean, integer)'::"
                    "regprocedure)"),
            "SETOF pgmq.message_record");
  EXPECT_EQ(e.read(5), (std::vector<int64_t>{4, 5}));
  EXPECT_TRUE(e.read(5).empty());
}

TEST(CmdbusRead, PerTypeLimitsLeaveTheRestUntouchedAndDoNotBlockOthers) {
  read_env e;
  // A backlog of a capped type ahead of another type.
  std::vector<int64_t> slow, fast;
  for (int i = 0; i < 20; ++i)
    slow.push_back(e.send("Slow"));
  for (int i = 0; i < 5; ++i)
    fast.push_back(e.send("Fast"));
  // Slow at its cap (0): none of it is claimed, and every Fast is.
  EXPECT_EQ(e.read(10, ", ARRAY['Slow'], ARRAY[0]"), fast);
  for (auto id : slow) {
    EXPECT_EQ(e.read_ct(id), 0) << id;
    EXPECT_TRUE(e.visible(id)) << id;
  }
  // One free slot of Slow: one Slow, in msg_id order.
  EXPECT_EQ(e.read(10, ", ARRAY['Slow'], ARRAY[1]"),
            std::vector<int64_t>{slow[0]});
  EXPECT_EQ(e.read_ct(slow[1]), 0);
  EXPECT_TRUE(e.visible(slow[1]));
  // Limits of several types, and types not listed limited by qty only.
  auto other = e.send("Other");
  auto more_fast = e.send("Fast");
  auto got = e.read(10, ", ARRAY['Slow', 'Fast'], ARRAY[2, 0]");
  EXPECT_EQ(got, (std::vector<int64_t>{slow[1], slow[2], other}));
  EXPECT_EQ(e.read_ct(more_fast), 0);
}

TEST(CmdbusRead, HighestPriorityFirstWithAnOldestFirstShare) {
  read_env e;
  auto none = e.send("A");                        // 0
  auto low = e.send("A", R"("priority":-5)");     // -5
  auto high = e.send("A", R"("priority":10)");    // 10
  auto mid = e.send("A", R"("priority":3)");      // 3
  auto odd = e.send("A", R"("priority":"high")"); // not a number: 0
  auto high2 = e.send("A", R"("priority":10)");
  auto scalar_msg = e.c()
                      .query("SELECT pgmq.send($1, '\"x\"'::jsonb)", e.queue)
                      .int64(0, 0); // not an object: 0
  EXPECT_EQ(e.read(3, ", NULL, NULL, NULL, NULL, true, 0"),
            (std::vector<int64_t>{high, high2, mid}));
  // One oldest-first, the rest by priority.
  EXPECT_EQ(e.read(3, ", NULL, NULL, NULL, NULL, true, 1"),
            (std::vector<int64_t>{none, odd, scalar_msg}));
  EXPECT_EQ(e.read(3, ", NULL, NULL, NULL, NULL, true, 0"),
            std::vector<int64_t>{low});
}

TEST(CmdbusRead, TheOldestFirstShareRespectsTypeLimits) {
  read_env e;
  auto s1 = e.send("Slow");
  auto f1 = e.send("Fast");
  auto f2 = e.send("Fast", R"("priority":5)");
  auto s2 = e.send("Slow", R"("priority":9)");
  // The oldest is a Slow at its cap: the oldest-first share takes the
  // oldest Fast instead; the priority order then the Fast of priority 5.
  EXPECT_EQ(e.read(2, ", ARRAY['Slow'], ARRAY[0], NULL, NULL, true, 1"),
            (std::vector<int64_t>{f1, f2}));
  EXPECT_EQ(e.read_ct(s1), 0);
  EXPECT_EQ(e.read_ct(s2), 0);
}

TEST(CmdbusRead, ShardsSplitTheQueueWithoutOverlap) {
  read_env e;
  for (int i = 0; i < 12; ++i)
    e.send("A");
  std::set<int64_t> all;
  for (int shard = 0; shard < 3; ++shard) {
    auto got = e.read(100, ", NULL, NULL, " + std::to_string(shard) + ", 3");
    EXPECT_EQ(got.size(), 4u) << shard;
    for (auto id : got) {
      EXPECT_EQ(id % 3, shard);
      EXPECT_TRUE(all.insert(id).second) << id;
    }
  }
  EXPECT_EQ(all.size(), 12u);
}

TEST(CmdbusRead, BadArgumentsAreRefused) {
  read_env e;
  e.send("A");
  for (const char* args :
       {", ARRAY['A'], ARRAY[1, 2]", ", ARRAY['A'], ARRAY[-1]",
        ", ARRAY['A'], ARRAY[NULL]::int[]", ", NULL, NULL, 3, 3",
        ", NULL, NULL, -1, 3", ", NULL, NULL, 0, 0", ", NULL, NULL, 0, NULL",
        ", NULL, NULL, NULL, NULL, true, -1"}) {
    try {
      e.read(1, args);
      ADD_FAILURE() << "accepted" << args;
    } catch (const db::error& err) {
      EXPECT_EQ(err.sqlstate(), "22023") << args;
    }
  }
  try {
    e.read(-1);
    ADD_FAILURE() << "accepted a negative qty";
  } catch (const db::error& err) {
    EXPECT_EQ(err.sqlstate(), "22023");
  }
  // Nothing was claimed by the refused reads.
  EXPECT_EQ(e.read_ct(1), 0);
}

TEST(CmdbusRead, RowsHeldByAnotherSessionAreSkipped) {
  read_env e;
  auto a = e.send("A", R"("priority":9)");
  auto b = e.send("A");
  auto other = connect();
  other.exec("BEGIN");
  other.query("SELECT msg_id FROM pgmq.q_" + e.queue
                + " WHERE msg_id = $1 FOR UPDATE",
              a);
  // The held row is skipped, not waited for, with every option.
  EXPECT_EQ(e.read(5, ", ARRAY['A'], ARRAY[5], 0, 1, true, 1"),
            std::vector<int64_t>{b});
  other.exec("ROLLBACK");
  EXPECT_EQ(e.read(5, ", NULL, NULL, NULL, NULL, true, 0"),
            std::vector<int64_t>{a});
}

TEST(CmdbusRead, ConcurrentReadersClaimEachMessageOnce) {
  read_env e;
  constexpr int total = 400;
  for (int i = 0; i < total; ++i)
    e.send(i % 2 == 0 ? "A" : "B", "\"priority\":" + std::to_string(i % 7));
  std::vector<std::vector<int64_t>> got(4);
  std::vector<std::thread> readers;
  for (size_t t = 0; t < got.size(); ++t)
    readers.emplace_back([&, t] {
      auto conn = connect();
      for (;;) {
        auto r = conn.query(
          "SELECT msg_id FROM commandbus.cmdbus_read($1, 30, 7, "
          "ARRAY['A'], ARRAY[3], NULL, NULL, true, 1)",
          e.queue);
        if (r.rows() == 0)
          break;
        for (int i = 0; i < r.rows(); ++i)
          got[t].push_back(r.int64(i, 0));
      }
    });
  for (auto& t : readers)
    t.join();
  std::set<int64_t> seen;
  size_t n = 0;
  for (auto& g : got)
    for (auto id : g) {
      ++n;
      EXPECT_TRUE(seen.insert(id).second) << "claimed twice: " << id;
    }
  EXPECT_EQ(n, static_cast<size_t>(total));
  EXPECT_EQ(*scalar(e.c(), "SELECT max(read_ct)::text FROM pgmq.q_" + e.queue),
            "1");
}

TEST(CmdbusReceiveRead, ClaimsCommandsInPriorityOrder) {
  read_env e;
  std::vector<uuid> ids;
  for (int p : {0, 5, 1}) {
    auto req = make_req(e.domain, "A");
    if (p != 0)
      req.priority = p;
    ids.push_back(e.env.bus.send(req).command_id);
  }
  db::worker_store store{e.c(), e.domain};
  db::read_options how;
  how.priority = true;
  auto res = store.receive(30, 10, how);
  ASSERT_EQ(res.commands.size(), 3u);
  EXPECT_EQ(res.commands[0].cmd.command_id, ids[1]);
  EXPECT_EQ(res.commands[0].cmd.priority, 5);
  EXPECT_EQ(res.commands[1].cmd.command_id, ids[2]);
  EXPECT_EQ(res.commands[2].cmd.command_id, ids[0]);
  EXPECT_FALSE(res.commands[2].cmd.priority.has_value());
  // Claimed as by the plain read: IN_PROGRESS, attempt 1, RECEIVED with
  // the read's claim token.
  for (auto& id : ids) {
    EXPECT_EQ(status_of(e.c(), e.domain, id), "IN_PROGRESS");
    EXPECT_EQ(attempts_of(e.c(), e.domain, id), 1);
    EXPECT_EQ(count_events(e.c(), e.domain, id, "RECEIVED"), 1);
  }
  EXPECT_EQ(*scalar(e.c(),
                    "SELECT count(DISTINCT details_json ->> 'claim')::text "
                    "FROM commandbus.audit WHERE domain = $1 AND "
                    "event_type = 'RECEIVED'",
                    e.domain),
            "1");
}

TEST(CmdbusReceiveRead, ACommandWithoutPriorityIsTheSameMessage) {
  read_env e;
  auto req = make_req(e.domain, "A", R"({"x":1})");
  auto plain = e.env.bus.send(req);
  auto prio = make_req(e.domain, "A", R"({"x":1})");
  prio.priority = 7;
  auto with = e.env.bus.send(prio);
  EXPECT_EQ(*scalar(e.c(),
                    "SELECT (message ? 'priority')::text FROM pgmq.q_" + e.queue
                      + " WHERE msg_id = $1",
                    plain.msg_id),
            "false");
  EXPECT_EQ(*scalar(e.c(),
                    "SELECT message ->> 'priority' FROM pgmq.q_" + e.queue
                      + " WHERE msg_id = $1",
                    with.msg_id),
            "7");
}

TEST(CmdbusRead, ThePriorityIndexServesThePriorityOrder) {
  read_env e;
  for (int i = 0; i < 50; ++i)
    e.send("A", "\"priority\":" + std::to_string(i % 5));
  EXPECT_EQ(*scalar(e.c(),
                    "SELECT commandbus.cmdbus_create_priority_index($1)::text",
                    e.queue),
            "true");
  // Once only, under its documented name.
  EXPECT_EQ(*scalar(e.c(),
                    "SELECT commandbus.cmdbus_create_priority_index($1)::text",
                    e.queue),
            "false");
  EXPECT_EQ(*scalar(e.c(),
                    "SELECT count(*)::text FROM pg_indexes WHERE schemaname = "
                    "'pgmq' AND indexname = $1",
                    "q_" + e.queue + "_cmdbus_prio"),
            "1");
  // The read's order (the same expression) is an index scan.
  e.c().exec("SET enable_seqscan = off");
  auto plan = e.c().query(
    "EXPLAIN SELECT q.msg_id FROM pgmq.q_" + e.queue
    + " q WHERE q.vt <= clock_timestamp() ORDER BY CASE WHEN "
      "jsonb_typeof(q.message -> 'priority') = 'number' THEN (q.message ->> "
      "'priority')::numeric ELSE 0 END DESC, q.msg_id LIMIT 5");
  std::string text;
  for (int i = 0; i < plan.rows(); ++i)
    text += std::string{plan.text(i, 0)} + "\n";
  e.c().exec("RESET enable_seqscan");
  EXPECT_NE(text.find("_cmdbus_prio"), std::string::npos) << text;
  EXPECT_EQ(text.find("Sort"), std::string::npos) << text;
  // The read still returns the highest first.
  auto got = e.read(3, ", NULL, NULL, NULL, NULL, true, 0");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(*scalar(e.c(),
                    "SELECT min((message ->> 'priority')::int)::text FROM "
                    "pgmq.q_" + e.queue + " WHERE msg_id = ANY($1::bigint[])",
                    db::array_literal(got)),
            "4");
  try {
    e.c().query("SELECT commandbus.cmdbus_create_priority_index('nosuch')");
    ADD_FAILURE() << "indexed a queue that does not exist";
  } catch (const db::error& err) {
    EXPECT_EQ(err.sqlstate(), "22023");
  }
}
