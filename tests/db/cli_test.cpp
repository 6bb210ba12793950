#include <gtest/gtest.h>

#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

TEST(CliMigrate, HelpExitsZero) {
  auto r = test::run_cmdbus({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("migrate"), std::string::npos);
  r = test::run_cmdbus({"migrate", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("usage: cmdbus migrate"), std::string::npos);
}

TEST(CliMigrate, UsageErrorsExitOne) {
  auto r = test::run_cmdbus({});
  EXPECT_EQ(r.exit_code, 1);
  r = test::run_cmdbus({"frobnicate"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos);
  r = test::run_cmdbus({"migrate", "--bogus"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown option '--bogus'"), std::string::npos);
  r = test::run_cmdbus({"migrate", "--dsn"});
  EXPECT_EQ(r.exit_code, 1);
}

TEST(CliMigrate, UnknownOptionIsShownWithoutItsValue) {
  // A mistyped --dsn=... may carry a password.
  auto r = test::run_cmdbus({"migrate", "--dns=host=x password=hunter2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown option '--dns'; did you mean --dsn?"),
            std::string::npos)
    << r.err;
  EXPECT_EQ(r.err.find("hunter2"), std::string::npos) << r.err;
}

TEST(CliMigrate, MigratesWithDsnAndIsIdempotent) {
  test::scratch_database scratch;
  auto r = test::run_cmdbus({"migrate", "--dsn", scratch.dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("applied commandbus/V001"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is up to date"), std::string::npos);
  EXPECT_EQ(r.out.find("password"), std::string::npos);
  r = test::run_cmdbus({"migrate", "--dsn=" + scratch.dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0 migration(s) applied"), std::string::npos) << r.out;
}

TEST(CliMigrate, TakesDsnFromEnvironment) {
  test::scratch_database scratch;
  auto r = test::run_cmdbus({"migrate"}, {"CMDBUS_DSN=" + scratch.dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("is up to date"), std::string::npos);
}

TEST(CliMigrate, TakesConnectionFromLibpqEnvironment) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  // PGHOST etc. as a user would export them; here derived from the test DSN.
  auto res = conn.exec("SELECT current_user, inet_server_port()");
  auto r = test::run_cmdbus(
      {"migrate"}, {"PGHOST=127.0.0.1", "PGPORT=" + std::string{res.text(0, 1)},
                    "PGUSER=" + std::string{res.text(0, 0)},
                    "PGPASSWORD=cmdbus", "PGDATABASE=" + scratch.name()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(scratch.name()), std::string::npos) << r.out;
}

TEST(CliMigrate, UnreachableServerExitsThreeWithClearMessage) {
  auto r = test::run_cmdbus({"migrate", "--dsn",
                             "host=127.0.0.1 port=1 dbname=x user=u "
                             "password=hunter2 connect_timeout=3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(test::crashed(r)) << r.err;
  EXPECT_NE(r.err.find("cannot connect to u@127.0.0.1:1/x"), std::string::npos)
    << r.err;
  EXPECT_EQ(r.err.find("hunter2"), std::string::npos);
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliMigrate, WrongCredentialsExitSixWithoutPassword) {
  auto dsn = test::with_dbname(test::dsn(), "postgres") + " password=not-the-pw";
  auto r = test::run_cmdbus({"migrate", "--dsn", dsn});
  EXPECT_EQ(r.exit_code, 6);
  EXPECT_FALSE(test::crashed(r)) << r.err;
  EXPECT_NE(r.err.find("password authentication failed"), std::string::npos)
    << r.err;
  EXPECT_EQ(r.err.find("not-the-pw"), std::string::npos);
}

TEST(CliMigrate, MalformedDsnIsAUsageError) {
  auto r =
      test::run_cmdbus({"migrate", "--dsn", "host=x password oops-secret"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("invalid connection string"), std::string::npos);
  EXPECT_EQ(r.err.find("oops-secret"), std::string::npos);
}
