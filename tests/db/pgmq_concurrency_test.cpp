// Tests of the PGMQ layer (sql/pgmq/V001__pgmq.sql, or the pgmq extension where
// it is installed) against PGMQ 1.5's documented behaviour, the scenarios of
// upstream's test/sql/base.sql and its isolation specs plus edge cases; this
// part: transactions and concurrency. Every test uses its own queues
// (test::unique_name) and drops them at the end, so tests do not depend on each
// other or on the database's history. Only the scenarios that are about time
// wait, for 1-2 s at most. Shared fixtures: tests/db/pgmq_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/pgmq_support.hpp"

using namespace cmdbus;
using db::errc;
using namespace cmdbus::pgmq_test;

// -- transactions and concurrency (transaction_tests.spec) --------------------------

// (a)
TEST_F(PgmqIsolation, UncommittedSendIsInvisible) {
  auto q = new_queue();
  auto other = test::connect();
  int64_t id = 0;
  {
    db::transaction tx{conn};
    id = send(q, "{\"a\": 1}");
    EXPECT_EQ(other.query("SELECT * FROM pgmq.read($1::text, 10, 1)", q).rows(), 0);
    tx.commit();
  }
  EXPECT_EQ(ints(other.query("SELECT msg_id FROM pgmq.read($1::text, 10, 1)", q)), std::vector<int64_t>{id});
  EXPECT_TRUE(other.query("SELECT pgmq.delete($1::text, $2::bigint)", q, id).boolean(0, 0));
}

// (b)
TEST_F(PgmqIsolation, ReadInOpenTransactionIsSkippedUntilRollback) {
  auto q = new_queue();
  auto id = send(q);
  auto other = test::connect();
  {
    db::transaction tx{conn};
    EXPECT_EQ(read_ids(q, 30, 1), std::vector<int64_t>{id});
    // SKIP LOCKED: no waiting, no row.
    EXPECT_EQ(other.query("SELECT * FROM pgmq.read($1::text, 30, 1)", q).rows(), 0);
    EXPECT_EQ(other.query("SELECT * FROM pgmq.pop($1::text)", q).rows(), 0);
  } // rollback undoes vt and read_ct
  auto r = other.query("SELECT msg_id, read_ct FROM pgmq.read($1::text, 30, 1)", q);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.int64(0, 0), id);
  EXPECT_EQ(r.int64(0, 1), 1);
}

TEST_F(PgmqIsolation, LockedRowsAreSkippedNotWaitedFor) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g)) FROM generate_series(1, 10) g))", q);
  auto other = test::connect();
  other.set_statement_timeout(std::chrono::milliseconds(5000));
  db::transaction tx{conn};
  EXPECT_EQ(read_ids(q, 0, 4), range(1, 4)); // vt 0: visible again, but locked
  EXPECT_EQ(ints(other.query("SELECT msg_id FROM pgmq.read($1::text, 30, 100)", q)), range(5, 10));
}

TEST_F(PgmqConcurrency, ParallelReadersNeverShareAMessage) {
  auto q = new_queue();
  constexpr int total = 3000;
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g)) FROM generate_series(1, $2::integer) g))",
                            q, total)),
            range(1, total));
  constexpr int readers = 4;
  std::vector<std::vector<int64_t>> got(readers);
  std::vector<std::string> failures(readers);
  std::vector<std::thread> threads;
  for (int t = 0; t < readers; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto c = test::connect();
        for (;;) {
          db::transaction tx{c};
          // Two reads per transaction, so open transactions overlap.
          auto a = c.query("SELECT msg_id FROM pgmq.read($1::text, 300, 7)", q);
          auto b = c.query("SELECT msg_id FROM pgmq.read($1::text, 300, 5)", q);
          for (auto* r : {&a, &b})
            for (int i = 0; i < r->rows(); ++i)
              got[t].push_back(r->int64(i, 0));
          tx.commit();
          if (a.rows() == 0 && b.rows() == 0)
            break;
        }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& th : threads)
    th.join();
  std::vector<int64_t> all;
  for (int t = 0; t < readers; ++t) {
    EXPECT_EQ(failures[t], "") << "reader " << t;
    all.insert(all.end(), got[t].begin(), got[t].end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a message was delivered twice";
  EXPECT_EQ(all, range(1, total));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE read_ct <> 1"), 0);
}

TEST_F(PgmqConcurrency, ParallelPopsNeverShareAMessage) {
  auto q = new_queue();
  constexpr int total = 400;
  conn.query("SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g)) FROM generate_series(1, $2::integer) g))", q, total);
  std::vector<std::vector<int64_t>> got(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto c = test::connect();
        for (;;) {
          auto r = c.query("SELECT msg_id FROM pgmq.pop($1::text)", q);
          if (r.rows() == 0)
            break;
          got[t].push_back(r.int64(0, 0));
        }
      } catch (const std::exception&) {
        got[t].push_back(-1);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  std::vector<int64_t> all = got[0];
  all.insert(all.end(), got[1].begin(), got[1].end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, range(1, total));
}

TEST_F(PgmqConcurrency, ConcurrentCreatesOfOneQueueSucceed) {
  auto q = track(test::unique_name("pcc"));
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto c = test::connect();
        c.query("SELECT pgmq.create($1::text)", q);
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& th : threads)
    th.join();
  for (auto& f : failures)
    EXPECT_EQ(f, "");
  EXPECT_EQ(objects_named_like(q), 3);
}
