#include <gtest/gtest.h>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/error.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

TEST(DbConnection, RunsParameterisedStatements) {
  auto conn = test::connect();
  auto res = conn.query("SELECT $1::int + $2::int, $3::text, $4::text IS NULL",
                        40, 2, std::string{"it's"}, std::nullopt);
  ASSERT_EQ(res.rows(), 1);
  EXPECT_EQ(res.int64(0, 0), 42);
  EXPECT_EQ(res.text(0, 1), "it's");
  EXPECT_TRUE(res.boolean(0, 2));
}

TEST(DbConnection, ClassifiesErrorsBySqlstate) {
  auto conn = test::connect();
  try {
    conn.exec("SELECT * FROM no_such_table_anywhere");
    FAIL() << "expected an error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::undefined_table);
    EXPECT_EQ(e.sqlstate(), "42P01");
    EXPECT_STREQ(e.what(), "relation \"no_such_table_anywhere\" does not exist");
  }
  try {
    conn.exec("DO $$ BEGIN RAISE EXCEPTION 'boom'; END $$");
    FAIL() << "expected an error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::raise_exception);
    EXPECT_STREQ(e.what(), "boom");
  }
  // The connection stays usable after errors.
  EXPECT_EQ(conn.exec("SELECT 1").int64(0, 0), 1);
}

TEST(DbConnection, StatementTimeoutIsTypedAndRecoverable) {
  auto conn = test::connect();
  conn.set_statement_timeout(std::chrono::milliseconds{50});
  try {
    conn.exec("SELECT pg_sleep(5)");
    FAIL() << "expected a statement timeout";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::statement_timeout);
    EXPECT_TRUE(e.is_transient());
  }
  EXPECT_EQ(conn.exec("SELECT 1").int64(0, 0), 1);
}

TEST(DbConnection, UniqueViolationIsTyped) {
  auto conn = test::connect();
  conn.exec("CREATE TEMP TABLE t (id int PRIMARY KEY)");
  conn.query("INSERT INTO t VALUES ($1)", 1);
  try {
    conn.query("INSERT INTO t VALUES ($1)", 1);
    FAIL() << "expected a unique violation";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::unique_violation);
  }
}

TEST(DbConnection, TransactionRollsBackUnlessCommitted) {
  auto conn = test::connect();
  conn.exec("CREATE TEMP TABLE t (id int)");
  {
    db::transaction tx{conn};
    conn.query("INSERT INTO t VALUES ($1)", 1);
  }
  EXPECT_EQ(conn.exec("SELECT count(*) FROM t").int64(0, 0), 0);
  {
    db::transaction tx{conn};
    conn.query("INSERT INTO t VALUES ($1)", 2);
    tx.commit();
  }
  EXPECT_EQ(conn.exec("SELECT count(*) FROM t").int64(0, 0), 1);
}

TEST(DbConnection, UnreachableServerGivesConnectionError) {
  try {
    db::connection_options opts;
    opts.connect_timeout = std::chrono::seconds{2};
    db::connection::open("host=127.0.0.1 port=1 dbname=x user=u password=s3cret",
                         opts);
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection);
    std::string msg = e.what();
    EXPECT_NE(msg.find("u@127.0.0.1:1/x"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("s3cret"), std::string::npos) << msg;
  }
}

TEST(DbConnection, WrongPasswordGivesConnectionErrorWithoutSecret) {
  auto bad = test::with_dbname(test::dsn(), "cmdbus") + " password=wrong-pw-123";
  try {
    db::connection::open(bad);
    FAIL() << "expected an authentication failure";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection);
    std::string msg = e.what();
    EXPECT_NE(msg.find("password authentication failed"), std::string::npos)
      << msg;
    EXPECT_EQ(msg.find("wrong-pw-123"), std::string::npos) << msg;
  }
}

TEST(DbConnection, MalformedDsnIsRejectedWithoutEchoingIt) {
  try {
    db::connection::open("host=localhost password secret-token");
    FAIL() << "expected invalid_argument";
  } catch (const db::invalid_argument& e) {
    EXPECT_EQ(std::string{e.what()}.find("secret-token"), std::string::npos);
  }
}

TEST(DbConnection, ApplicationNameAndStatementTimeoutArePerConnection) {
  db::connection_options opts;
  opts.application_name = "cmdbus-test-app";
  opts.statement_timeout = std::chrono::milliseconds{1234};
  auto conn = db::connection::open(test::dsn(), opts);
  auto res = conn.exec("SELECT current_setting('application_name'), "
                       "current_setting('statement_timeout')");
  EXPECT_EQ(res.text(0, 0), "cmdbus-test-app");
  EXPECT_EQ(res.text(0, 1), "1234ms");
  // Visible to operators in pg_stat_activity.
  auto other = test::connect();
  auto seen = other.query(
    "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
    conn.backend_pid());
  ASSERT_EQ(seen.rows(), 1);
  EXPECT_EQ(seen.text(0, 0), "cmdbus-test-app");
  // Another connection keeps the defaults.
  EXPECT_EQ(other.exec("SELECT current_setting('application_name')").opt_text(0, 0),
            "cmdbus");
}

TEST(DbConnection, PreparedStatementsAreReused) {
  auto conn = test::connect();
  for (int i = 0; i < 3; ++i) {
    auto r = conn.exec_prepared("t_add", "SELECT $1::int + 1",
                                {db::to_param(i)});
    EXPECT_EQ(r.int64(0, 0), i + 1);
  }
  auto n = conn.exec(
    "SELECT count(*) FROM pg_prepared_statements WHERE name = 't_add'");
  EXPECT_EQ(n.int64(0, 0), 1);
}

TEST(DbConnection, CopyInWritesEscapedFieldsExactly) {
  auto conn = test::connect();
  conn.exec("CREATE TEMP TABLE c (id int PRIMARY KEY, t text, j jsonb)");
  std::string tricky = "tab\there\nnew line\rcr back\\slash \"q\" \xc3\xa9 \\N";
  std::string json =
      R"({"s":"a\\b\t\"c\"\n"})"; // JSON escapes, raw backslashes
  std::string data;
  for (int id : {1, 2}) {
    data += std::to_string(id) + "\t";
    db::append_copy_field(data, tricky);
    data += '\t';
    db::append_copy_field(data, json);
    data += '\n';
  }
  data += "3\t\\N\t\\N\n"; // NULLs
  EXPECT_EQ(conn.copy_in("COPY c (id, t, j) FROM STDIN", data), 3);
  auto r = conn.exec("SELECT t, j::text, j->>'s' FROM c ORDER BY id");
  ASSERT_EQ(r.rows(), 3);
  for (int row : {0, 1}) {
    EXPECT_EQ(r.text(row, 0), tricky);
    EXPECT_EQ(r.text(row, 1),
              conn.query("SELECT $1::jsonb::text", json).opt_text(0, 0));
    EXPECT_EQ(r.text(row, 2), "a\\b\t\"c\"\n");
  }
  EXPECT_TRUE(r.is_null(2, 0));
  EXPECT_TRUE(r.is_null(2, 1));
}

TEST(DbConnection, CopyInErrorsAreTypedAndLeaveTheConnectionUsable) {
  auto conn = test::connect();
  conn.exec("CREATE TEMP TABLE c (id int PRIMARY KEY)");
  conn.copy_in("COPY c (id) FROM STDIN", "1\n");
  // A failing row: nothing of the COPY is kept.
  try {
    conn.copy_in("COPY c (id) FROM STDIN", "2\n1\n");
    FAIL() << "expected a unique violation";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::unique_violation);
  }
  EXPECT_EQ(conn.exec("SELECT count(*) FROM c").int64(0, 0), 1);
  // Bad data and an unknown table are errors too; so is a statement that
  // is not COPY FROM STDIN.
  EXPECT_THROW(conn.copy_in("COPY c (id) FROM STDIN", "x\n"), db::error);
  EXPECT_THROW(conn.copy_in("COPY no_such_table FROM STDIN", "1\n"), db::error);
  EXPECT_THROW(conn.copy_in("SELECT 1", ""), db::invalid_argument);
  EXPECT_THROW(conn.copy_in("COPY c TO STDOUT", ""), db::invalid_argument);
  EXPECT_EQ(conn.exec("SELECT count(*) FROM c").int64(0, 0), 1);
  // Inside a transaction the failure aborts it, as any failed statement.
  conn.exec("BEGIN");
  EXPECT_THROW(conn.copy_in("COPY c (id) FROM STDIN", "1\n"), db::error);
  EXPECT_TRUE(conn.in_transaction());
  conn.exec("ROLLBACK");
  EXPECT_EQ(conn.copy_in("COPY c (id) FROM STDIN", "5\n6\n"), 2);
  EXPECT_EQ(conn.exec("SELECT count(*) FROM c").int64(0, 0), 3);
}
