// The connection pool against the real database: reuse, replacing a
// connection the server ended, rolling back what a caller left open,
// exhaustion, reconnect backoff. A call that could hang runs on a thread of
// its own with a deadline (`returns_within`).

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

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
