// DSNs as cmdbus shows them (db/dsn.hpp): masked for messages and
// --dump-config, or as the target "user@host:port/dbname" for logs. Both read
// the DSN with libpq's parser, so libpq decides what a DSN means. And DSNs
// read from a file of their own (--dsn-file), which only its owner may read.

#include "cmdbus/db/dsn.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.hpp"

using cmdbus::db::describe_target;
using cmdbus::db::mask_dsn;
using cmdbus::db::read_dsn_file;

namespace {

namespace fs = std::filesystem;

/// The message of the invalid_argument that `f` throws, or "".
template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const cmdbus::db::invalid_argument& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

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

// -- DSN files ---------------------------------------------------------------

TEST(DsnFile, reads_the_dsn_without_its_line_ends) {
  cmdbus::test::temp_dir dir;
  auto owner_only = fs::perms::owner_read | fs::perms::owner_write;
  for (auto [content, dsn] :
       {std::pair{"host=db password=s3cret\n", "host=db password=s3cret"},
        {"host=db\r\n", "host=db"},
        {"host=db\n\n", "host=db"},
        {"host=db", "host=db"},
        {"host=db\ndbname=app\n", "host=db\ndbname=app"}}) {
    auto path = dir.write("dsn", content);
    fs::permissions(path, owner_only);
    EXPECT_EQ(read_dsn_file(path), dsn) << content;
  }
  // Read-only for its owner is fine too.
  auto path = dir.write("ro", "host=db\n");
  fs::permissions(path, fs::perms::owner_read);
  EXPECT_EQ(read_dsn_file(path), "host=db");
}

TEST(DsnFile, refuses_a_file_that_others_may_read_without_showing_it) {
  cmdbus::test::temp_dir dir;
  auto path = dir.write("dsn", "host=db password=s3cret\n");
  for (auto [mode, shown] :
       {std::pair{fs::perms::owner_read | fs::perms::owner_write
                    | fs::perms::group_read | fs::perms::others_read,
                  "0644"},
        {fs::perms::owner_read | fs::perms::group_read, "0440"},
        {fs::perms::owner_read | fs::perms::owner_write
           | fs::perms::others_write,
         "0602"},
        {fs::perms::owner_read | fs::perms::group_exec, "0410"}}) {
    fs::permissions(path, mode);
    auto what = refusal([&] { read_dsn_file(path); });
    EXPECT_TRUE(contains(what, "DSN file \"" + path + "\"")) << what;
    EXPECT_TRUE(contains(what, std::string{"(mode "} + shown + ")")) << what;
    EXPECT_TRUE(contains(what, "chmod 600")) << what;
    EXPECT_FALSE(contains(what, "s3cret")) << what;
  }
}

TEST(DsnFile, refuses_a_missing_empty_or_odd_file) {
  cmdbus::test::temp_dir dir;
  EXPECT_EQ(refusal([&] { read_dsn_file(dir.file("none")); }),
            "DSN file \"" + dir.file("none") + "\": No such file or directory");
  auto empty = dir.write("empty", "\n");
  fs::permissions(empty, fs::perms::owner_read);
  EXPECT_EQ(refusal([&] { read_dsn_file(empty); }),
            "DSN file \"" + empty
              + "\": empty (it should hold a connection string)");
  EXPECT_EQ(refusal([&] { read_dsn_file(dir.path.string()); }),
            "DSN file \"" + dir.path.string() + "\": not a regular file");
  EXPECT_EQ(refusal([] { read_dsn_file(""); }), "the DSN file's name is empty");
  // A name with control characters prints on one line.
  EXPECT_EQ(refusal([&] { read_dsn_file(dir.file("a\nb")); }),
            "DSN file \"" + dir.path.string()
              + "/a\\x0ab\": No such file or directory");
}
