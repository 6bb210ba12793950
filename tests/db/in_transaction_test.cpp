// db::in_transaction on a connection and on a pool: commit on return,
// rollback when the function throws (its exception unchanged), a failed
// COMMIT rolled back and reported, the caller's open transaction joined and
// left to the caller, and a broken connection (its server process
// terminated, or the network cut by a proxy) reported as a connection error
// with nothing written and, on a pool, not handed out again.

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/transaction.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

namespace {

struct boom : std::runtime_error {
  boom() : std::runtime_error("boom") {}
};

class DbInTransaction : public ::testing::Test {
protected:
  DbInTransaction() : checker(test::connect()), table(test::unique_name("it")) {
    checker.exec("CREATE TABLE " + table
                 + " (id int PRIMARY KEY, u int UNIQUE DEFERRABLE INITIALLY "
                   "DEFERRED)");
  }

  ~DbInTransaction() override {
    try {
      checker.exec("DROP TABLE IF EXISTS " + table);
    } catch (const std::exception&) {
      // the table is unique to the test; a leftover harms nothing
    }
  }

  void insert(db::connection& conn, int id, int u = 0) {
    conn.query("INSERT INTO " + table + " VALUES ($1::int, $2::int)", id,
               u == 0 ? id : u);
  }

  int64_t rows() {
    return checker.exec("SELECT count(*) FROM " + table).int64(0, 0);
  }

  db::connection checker;
  std::string table;
};

} // namespace

// -- on a connection ----------------------------------------------------------

TEST_F(DbInTransaction, CommitsWhenTheFunctionReturns) {
  auto conn = test::connect();
  auto out = db::in_transaction(conn, [&](db::connection& c) {
    EXPECT_EQ(&c, &conn);
    EXPECT_TRUE(c.in_transaction());
    insert(c, 1);
    insert(c, 2);
    return std::string{"done"};
  });
  EXPECT_EQ(out, "done");
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(rows(), 2);
  // A function returning nothing.
  db::in_transaction(conn, [&](db::connection& c) { insert(c, 3); });
  EXPECT_EQ(rows(), 3);
}

TEST_F(DbInTransaction, RollsBackWhenTheFunctionThrowsAndRethrowsItsError) {
  auto conn = test::connect();
  EXPECT_THROW(db::in_transaction(conn,
                                  [&](db::connection& c) -> int {
                                    insert(c, 1);
                                    throw boom{};
                                  }),
               boom);
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(rows(), 0);
  // A failed statement aborts the transaction: rolled back, the server's
  // error propagates, and the connection is usable.
  try {
    db::in_transaction(conn, [&](db::connection& c) {
      insert(c, 1);
      insert(c, 1);
    });
    FAIL() << "expected a unique violation";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::unique_violation);
  }
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(rows(), 0);
  EXPECT_EQ(conn.exec("SELECT 1").int64(0, 0), 1);
}

TEST_F(DbInTransaction, AFailedCommitIsRolledBackAndReported) {
  auto conn = test::connect();
  // The deferred unique constraint is checked at COMMIT.
  try {
    db::in_transaction(conn, [&](db::connection& c) {
      insert(c, 1, 7);
      insert(c, 2, 7);
    });
    FAIL() << "expected the commit to fail";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::unique_violation);
  }
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(rows(), 0);
  EXPECT_EQ(conn.exec("SELECT 1").int64(0, 0), 1);
}

TEST_F(DbInTransaction, JoinsTheCallersTransactionAndLeavesItOpen) {
  auto conn = test::connect();
  db::transaction outer{conn};
  insert(conn, 1);
  db::in_transaction(conn, [&](db::connection& c) { insert(c, 2); });
  EXPECT_TRUE(conn.in_transaction()); // nothing committed here
  EXPECT_EQ(rows(), 0);
  // An exception leaves the caller's transaction to the caller, too.
  EXPECT_THROW(db::in_transaction(conn,
                                  [&](db::connection& c) {
                                    insert(c, 3);
                                    throw boom{};
                                  }),
               boom);
  EXPECT_TRUE(conn.in_transaction());
  outer.commit();
  EXPECT_EQ(rows(), 3);
}

TEST_F(DbInTransaction,
       ATerminatedServerProcessIsAConnectionErrorAndNothingIsWritten) {
  auto conn = test::connect();
  try {
    db::in_transaction(conn, [&](db::connection& c) {
      insert(c, 1);
      checker.query("SELECT pg_terminate_backend($1)", c.backend_pid());
      insert(c, 2);
    });
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection) << e.what();
  }
  EXPECT_FALSE(conn.is_open());
  EXPECT_EQ(rows(), 0);
  // Starting on the broken connection fails the same way, before `fn`.
  bool ran = false;
  try {
    db::in_transaction(conn, [&](db::connection&) { ran = true; });
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection);
  }
  EXPECT_FALSE(ran);
}

// -- on a pool ----------------------------------------------------------------

TEST_F(DbInTransaction, OnAPoolCommitsAndRollsBackOnALeasedConnection) {
  db::pool pool{test::pool_options(1)};
  EXPECT_EQ(db::in_transaction(pool,
                               [&](db::connection& c) {
                                 insert(c, 1);
                                 return 42;
                               }),
            42);
  EXPECT_EQ(rows(), 1);
  EXPECT_THROW(db::in_transaction(pool,
                                  [&](db::connection& c) {
                                    insert(c, 2);
                                    throw boom{};
                                  }),
               boom);
  EXPECT_EQ(rows(), 1);
  // The connection went back to the pool with no transaction open.
  auto lease = pool.acquire();
  EXPECT_FALSE(lease->in_transaction());
}

TEST_F(DbInTransaction, OnAPoolABrokenConnectionIsNotHandedOutAgain) {
  db::pool pool{test::pool_options(1)};
  int broken_pid = 0;
  try {
    db::in_transaction(pool, [&](db::connection& c) {
      broken_pid = c.backend_pid();
      insert(c, 1);
      checker.query("SELECT pg_terminate_backend($1)", c.backend_pid());
      insert(c, 2);
    });
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection) << e.what();
  }
  EXPECT_EQ(rows(), 0);
  // The pool of one opens a new connection for the next transaction.
  auto pid = db::in_transaction(pool, [&](db::connection& c) {
    insert(c, 3);
    return c.backend_pid();
  });
  EXPECT_NE(pid, broken_pid);
  EXPECT_EQ(rows(), 1);
}

// The network between the client and the server is cut in the middle of a
// transaction: a connection error, nothing written, and the pool recovers
// when the network is back.
TEST_F(DbInTransaction, ACutConnectionIsAConnectionErrorAndThePoolRecovers) {
  auto setting = checker.query("SELECT current_setting('port')");
  auto port = std::stoi(std::string{setting.text(0, 0)});
  auto proxy = std::make_shared<test::tcp_proxy>(port);
  auto opts = test::pool_options(1);
  opts.dsn = test::dsn() + " host=127.0.0.1 port="
             + std::to_string(proxy->port()) + " connect_timeout=2";
  opts.backoff_initial = std::chrono::milliseconds{10};
  opts.backoff_max = std::chrono::milliseconds{50};
  opts.log_failures = false;
  auto pool = std::make_shared<db::pool>(opts);
  auto error = std::make_shared<std::string>();
  auto sql = "INSERT INTO " + table + " VALUES ($1::int, $1::int)";
  // On a thread of its own (owning what it touches): a hang fails the test
  // instead of blocking the suite.
  ASSERT_TRUE(test::returns_within([pool, proxy, error, sql] {
    try {
      db::in_transaction(*pool, [&](db::connection& c) {
        c.query(sql, 1);
        proxy->cut();
        c.query(sql, 2);
      });
      *error = "no error";
    } catch (const db::error& e) {
      *error = e.code() == db::errc::connection ? "connection" : e.what();
    }
  }))
    << "in_transaction on a cut connection did not return";
  EXPECT_EQ(*error, "connection");
  EXPECT_EQ(rows(), 0);
  proxy->restore();
  ASSERT_TRUE(test::eventually([&] {
    try {
      db::in_transaction(*pool, [&](db::connection& c) { c.query(sql, 3); });
      return true;
    } catch (const db::error&) {
      return false;
    }
  }));
  EXPECT_EQ(rows(), 1);
}
