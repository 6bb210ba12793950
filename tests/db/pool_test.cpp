// The connection layer against the real database: pipelines (one round
// trip, the first error, no deadlock on large results, a lost connection),
// LISTEN/NOTIFY, and the pool (reuse, replacing a connection the server
// ended, rolling back what a caller left open, exhaustion, reconnect
// backoff). A call that could hang on a lost connection runs on a thread of
// its own with a deadline (`returns_within`).

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>

#include "db/connection.hpp"
#include "db/pool.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

TEST(DbPipeline, RunsStatementsInOneRoundTrip) {
  auto conn = test::connect();
  auto results = conn.pipeline({{"SELECT $1::int + 1", {db::to_param(1)}},
                                {"SELECT $1::text", {db::to_param("x")}},
                                {"SELECT generate_series(1, 3)", {}}});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].int64(0, 0), 2);
  EXPECT_EQ(results[1].text(0, 0), "x");
  EXPECT_EQ(results[2].rows(), 3);
  // The connection is back in normal mode.
  EXPECT_EQ(conn.exec("SELECT 7").int64(0, 0), 7);
}

TEST(DbPipeline, FirstErrorIsThrownAndTransactionRollsBack) {
  auto conn = test::connect();
  conn.exec("CREATE TEMP TABLE t (id int PRIMARY KEY)");
  try {
    conn.pipeline({{"BEGIN", {}},
                   {"INSERT INTO t VALUES ($1)", {db::to_param(1)}},
                   {"INSERT INTO t VALUES ($1)", {db::to_param(1)}},
                   {"INSERT INTO t VALUES ($1)", {db::to_param(2)}},
                   {"COMMIT", {}}});
    FAIL() << "expected a unique violation";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::unique_violation);
  }
  if (conn.in_transaction())
    conn.exec("ROLLBACK");
  EXPECT_EQ(conn.exec("SELECT count(*) FROM t").int64(0, 0), 0);
  EXPECT_EQ(conn.exec("SELECT 1").int64(0, 0), 1);
}

TEST(DbPipeline, LargePipelineDoesNotDeadlock) {
  auto conn = test::connect();
  std::vector<db::connection::statement> sts;
  // Each result is ~8 KB, far more than socket buffers hold in total.
  for (int i = 0; i < 2000; ++i)
    sts.push_back({"SELECT repeat('x', 8000), $1::int", {db::to_param(i)}});
  auto results = conn.pipeline(sts);
  ASSERT_EQ(results.size(), 2000u);
  EXPECT_EQ(results[1999].int64(0, 1), 1999);
}

// A pipeline on a connection whose server process is gone (a restart, a
// cut connection) reports a connection error instead of waiting for results
// that never come. Run on a thread of its own, so that a hang fails the test
// at the deadline instead of blocking the suite.
TEST(DbPipeline, LostConnectionIsReportedNotHung) {
  auto conn = std::make_shared<db::connection>(test::connect());
  auto admin = test::connect();
  admin.query("SELECT pg_terminate_backend($1)", conn->backend_pid());
  auto outcome = std::make_shared<std::string>();
  ASSERT_TRUE(test::returns_within([conn, outcome] {
    try {
      conn->pipeline({{"BEGIN", {}},
                      {"SELECT $1::int", {db::to_param(1)}},
                      {"COMMIT", {}}});
      *outcome = "no error";
    } catch (const db::error& e) {
      *outcome = e.code() == db::errc::connection ? "connection" : e.what();
    }
  })) << "pipeline on a lost connection did not return";
  EXPECT_EQ(*outcome, "connection");
  EXPECT_FALSE(conn->is_open());
}

TEST(DbListen, WaitReturnsNotificationsAndTimesOut) {
  auto listener = test::connect();
  auto channel = test::unique_name("pgmq_notify_t");
  listener.listen(channel);
  EXPECT_TRUE(listener.wait_for_notifications(10ms).empty());
  auto sender = test::connect();
  sender.exec("NOTIFY " + channel);
  sender.exec("NOTIFY " + channel);
  auto got = listener.wait_for_notifications(5000ms);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front(), channel);
}

TEST(DbListen, NotificationIsDeliveredOnlyAtCommit) {
  auto listener = test::connect();
  auto channel = test::unique_name("pgmq_notify_c");
  listener.listen(channel);
  auto sender = test::connect();
  db::transaction tx{sender};
  sender.exec("NOTIFY " + channel);
  EXPECT_TRUE(listener.wait_for_notifications(50ms).empty());
  tx.commit();
  EXPECT_FALSE(listener.wait_for_notifications(5000ms).empty());
}

TEST(DbListen, RejectsInvalidChannelNames) {
  auto conn = test::connect();
  EXPECT_THROW(conn.listen("x; DROP TABLE y"), db::invalid_argument);
  EXPECT_THROW(conn.listen(""), db::invalid_argument);
}

TEST(DbListen, BrokenConnectionIsReportedNotHung) {
  auto listener = test::connect();
  listener.listen(test::unique_name("pgmq_notify_b"));
  auto admin = test::connect();
  admin.query("SELECT pg_terminate_backend($1)", listener.backend_pid());
  try {
    // The terminated backend closes the socket: the wait returns at once.
    for (int i = 0; i < 100; ++i)
      listener.wait_for_notifications(5000ms);
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection);
  }
}

TEST(DbPool, ReusesConnections) {
  db::pool p{test::pool_options(2)};
  int pid = 0;
  {
    auto c = p.acquire();
    pid = c->backend_pid();
  }
  auto c = p.acquire();
  EXPECT_EQ(c->backend_pid(), pid);
  EXPECT_EQ(p.size(), 1u);
}

TEST(DbPool, ReplacesAConnectionKilledByTheServer) {
  db::pool p{test::pool_options(2)};
  int pid = 0;
  {
    auto c = p.acquire();
    pid = c->backend_pid();
  }
  auto admin = test::connect();
  admin.query("SELECT pg_terminate_backend($1)", pid);
  {
    auto c = p.acquire();
    // The first statement on the dead connection fails with a clear,
    // typed error ...
    EXPECT_THROW(
      {
        try {
          c->exec("SELECT 1");
        } catch (const db::error& e) {
          EXPECT_EQ(e.code(), db::errc::connection);
          throw;
        }
      },
      db::error);
  }
  // ... and the pool drops it, so the next caller gets a fresh one.
  auto c = p.acquire();
  EXPECT_NE(c->backend_pid(), pid);
  EXPECT_EQ(c->exec("SELECT 1").int64(0, 0), 1);
}

TEST(DbPool, RollsBackTransactionsLeftOpen) {
  db::pool p{test::pool_options(1)};
  {
    auto c = p.acquire();
    c->exec("BEGIN");
    c->exec("CREATE TEMP TABLE leftover (id int)");
  }
  auto c = p.acquire();
  EXPECT_FALSE(c->in_transaction());
  EXPECT_TRUE(c->exec("SELECT to_regclass('leftover')").is_null(0, 0));
}

TEST(DbPool, ExhaustionTimesOutWithClearError) {
  auto opts = test::pool_options(1);
  opts.acquire_timeout = 50ms;
  db::pool p{opts};
  auto held = p.acquire();
  try {
    p.acquire();
    FAIL() << "expected pool exhaustion";
  } catch (const db::error& e) {
    EXPECT_NE(std::string{e.what()}.find("exhausted"), std::string::npos);
  }
}

TEST(DbPool, WaitersGetReturnedConnections) {
  db::pool p{test::pool_options(2)};
  std::atomic<int> done{0};
  std::vector<std::future<void>> fs;
  for (int i = 0; i < 8; ++i)
    fs.push_back(std::async(std::launch::async, [&] {
      for (int j = 0; j < 20; ++j) {
        auto c = p.acquire();
        c->exec("SELECT 1");
      }
      ++done;
    }));
  for (auto& f : fs)
    f.get();
  EXPECT_EQ(done.load(), 8);
  EXPECT_LE(p.size(), 2u);
}

TEST(DbPool, UnreachableServerBacksOffAndFailsFast) {
  db::pool_options opts;
  opts.dsn = "host=127.0.0.1 port=1 dbname=x user=u password=pw connect_timeout=2";
  opts.backoff_initial = 60000ms;
  opts.backoff_max = 60000ms;
  db::pool p{opts};
  try {
    p.acquire();
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection);
  }
  EXPECT_EQ(p.consecutive_failures(), 1);
  // While backing off, callers get a clear error immediately and no new
  // connection attempt is made.
  try {
    p.acquire();
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection);
    std::string msg = e.what();
    EXPECT_NE(msg.find("next reconnect attempt in"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("pw"), std::string::npos) << msg;
  }
  EXPECT_EQ(p.consecutive_failures(), 1);
  EXPECT_EQ(p.size(), 0u);
}

TEST(DbPool, BackoffGrowsExponentiallyUpToTheCap) {
  using ms = std::chrono::milliseconds;
  EXPECT_EQ(db::backoff_delay(0, ms{100}, 2.0, ms{1000}), ms{0});
  EXPECT_EQ(db::backoff_delay(1, ms{100}, 2.0, ms{1000}), ms{100});
  EXPECT_EQ(db::backoff_delay(2, ms{100}, 2.0, ms{1000}), ms{200});
  EXPECT_EQ(db::backoff_delay(4, ms{100}, 2.0, ms{1000}), ms{800});
  EXPECT_EQ(db::backoff_delay(5, ms{100}, 2.0, ms{1000}), ms{1000});
  EXPECT_EQ(db::backoff_delay(50, ms{100}, 2.0, ms{1000}), ms{1000});
}
