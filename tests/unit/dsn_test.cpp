// DSNs as cmdbus shows them (db/dsn.hpp): masked for messages and
// --dump-config, or as the target "user@host:port/dbname" for logs. Both read
// the DSN with libpq's parser, so libpq decides what a DSN means.

#include "cmdbus/db/dsn.hpp"

#include <gtest/gtest.h>

using cmdbus::db::describe_target;
using cmdbus::db::mask_dsn;

TEST(DsnMask, masks_the_password_of_a_keyword_string) {
  EXPECT_EQ(mask_dsn("host=db password=secret dbname=x"),
            "host=db password=*** dbname=x");
  EXPECT_EQ(mask_dsn("password = 'se cr\\'et' host=db"),
            "password = *** host=db");
  EXPECT_EQ(mask_dsn("host=db password=a\\ b dbname=x"),
            "host=db password=*** dbname=x");
  EXPECT_EQ(mask_dsn("password="), "password=***");
}

TEST(DsnMask, masks_every_secret_that_libpq_knows) {
  EXPECT_EQ(mask_dsn("host=db sslpassword=s3 password=p"),
            "host=db sslpassword=*** password=***");
}

TEST(DsnMask, masks_the_password_of_a_uri) {
  EXPECT_EQ(mask_dsn("postgresql://user:secret@db:5432/app"),
            "postgresql://user:***@db:5432/app");
  EXPECT_EQ(mask_dsn("postgresql://u:a%40b@db/app"),
            "postgresql://u:***@db/app");
  EXPECT_EQ(
    mask_dsn("postgresql://db/app?user=u&password=secret&sslmode=disable"),
    "postgresql://db/app?user=u&password=***&sslmode=disable");
  EXPECT_EQ(mask_dsn("postgresql://u:pw@h1:5432,h2:5433/app"),
            "postgresql://u:***@h1:5432,h2:5433/app");
}

TEST(DsnMask, reads_the_uri_as_libpq_does) {
  // The user information ends at the first '@': libpq reads password "p"
  // and host "ss@db" (an '@' inside a password must be written %40).
  EXPECT_EQ(mask_dsn("postgres://u:p@ss@db/app?sslmode=off"),
            "postgres://u:***@ss@db/app?sslmode=off");
  EXPECT_EQ(describe_target("postgres://u:p@ss@db/app?sslmode=off"),
            "u@ss@db:5432/app");
}

TEST(DsnMask, rewrites_what_it_cannot_mask_in_place) {
  // libpq decodes the parameter's name: the DSN is written anew from
  // libpq's options, in libpq's order.
  EXPECT_EQ(mask_dsn("postgresql://db/app?pass%77ord=secret"),
            "password=*** dbname=app host=db");
}

TEST(DsnMask, leaves_a_dsn_without_secrets_alone) {
  EXPECT_EQ(mask_dsn("postgresql://user@db:5432/app"),
            "postgresql://user@db:5432/app");
  EXPECT_EQ(mask_dsn("host=db passfile=x"), "host=db passfile=x");
  EXPECT_EQ(mask_dsn(""), "");
}

TEST(DsnMask, masks_a_dsn_that_libpq_rejects_whole) {
  // Unknown keywords and URI parameters, or a missing '=', make libpq reject
  // the DSN: one cannot tell where its secret is.
  EXPECT_EQ(mask_dsn("host=db passwordfile=x"), "***");
  EXPECT_EQ(mask_dsn("postgresql://db/app?user=u&password=secret&x=1"),
            "***");
  EXPECT_EQ(mask_dsn("host=x password oops-secret"), "***");
}

TEST(DsnTarget, names_user_host_port_and_database) {
  EXPECT_EQ(describe_target(
              "host=db.example port=6543 dbname=orders user=app password=pw"),
            "app@db.example:6543/orders");
  EXPECT_EQ(describe_target("postgresql://app:pw@db.example:6543/orders"),
            "app@db.example:6543/orders");
  EXPECT_EQ(describe_target("host=x password oops-secret"),
            "(invalid connection string)");
}
