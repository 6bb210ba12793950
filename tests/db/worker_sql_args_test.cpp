// Tests of the set-based worker functions (sql/commandbus/V004) against a real
// PostgreSQL; this part: cmdbus_extend_visibility, argument checks and
// concurrency. They check the rows the reference worker writes: status
// transitions, attempts, audit rows and their details, queue and archive
// contents, replies and their NOTIFY, and the inline batch counters with the
// batches that just became complete (see docs/design.md). Commands are sent
// with command_bus; the functions are called with parameterised SQL. Every test
// works in its own domain (and queues), so tests never see each other's rows.
// Shared fixtures: tests/db/worker_sql_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/worker_sql_support.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;
using namespace cmdbus::worker_sql_test;

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
