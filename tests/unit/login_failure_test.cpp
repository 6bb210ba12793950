// db::login_failure_sqlstate reads the reason of a refused login from
// libpq's message (a failed connection attempt has no SQLSTATE). The texts
// below are what libpq 15 prints for each case, as psql shows them.

#include <gtest/gtest.h>

#include "cmdbus/db/error.hpp"

using cmdbus::db::login_failure_sqlstate;

TEST(LoginFailure, WrongOrMissingPasswordIs28P01) {
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server at \"127.0.0.1\", port 54334 failed: "
              "FATAL:  password authentication failed for user \"cmdbus\""),
            "28P01");
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server at \"127.0.0.1\", port 54334 failed: "
              "fe_sendauth: no password supplied"),
            "28P01");
  // Several addresses: the last attempt's reason counts as well.
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server at \"localhost\" (::1), port 5432 "
              "failed: Connection refused\n\tIs the server running on that "
              "host and accepting TCP/IP connections?\nconnection to server "
              "at \"localhost\" (127.0.0.1), port 5432 failed: FATAL:  "
              "password authentication failed for user \"app\""),
            "28P01");
}

TEST(LoginFailure, UnknownRoleOrNoHbaEntryIs28000) {
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server on socket "
              "\"/srv/pg/run/.s.PGSQL.54334\" failed: FATAL:  role "
              "\"nobody\" does not exist"),
            "28000");
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server at \"10.0.0.5\", port 5432 failed: "
              "FATAL:  no pg_hba.conf entry for host \"10.0.0.9\", user "
              "\"app\", database \"app\", no encryption"),
            "28000");
}

TEST(LoginFailure, MissingDatabaseIs3D000) {
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server at \"127.0.0.1\", port 54334 failed: "
              "FATAL:  database \"nosuchdb\" does not exist"),
            "3D000");
}

TEST(LoginFailure, OtherFailuresAreNotLoginFailures) {
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server at \"127.0.0.1\", port 1 failed: "
              "Connection refused\n\tIs the server running on that host and "
              "accepting TCP/IP connections?"),
            "");
  EXPECT_EQ(login_failure_sqlstate(
              "could not translate host name \"nowhere.invalid\" to "
              "address: Name or service not known"),
            "");
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server at \"127.0.0.1\", port 54334 failed: "
              "FATAL:  the database system is starting up"),
            "");
  EXPECT_EQ(login_failure_sqlstate(
              "connection to server at \"127.0.0.1\", port 54334 failed: "
              "FATAL:  sorry, too many clients already"),
            "");
  EXPECT_EQ(login_failure_sqlstate(""), "");
}
