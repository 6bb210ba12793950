#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

namespace {

db::migrate_report migrate_bundled(db::connection& conn) {
  return db::migrate(conn, sql::pgmq_files(), sql::commandbus_files());
}

int64_t count(db::connection& conn, const std::string& sql) {
  return conn.exec(sql).int64(0, 0);
}

// What migrating a fresh database on this server does. migrate installs the
// real pgmq extension when the server offers it (one applied step, no rows
// of ours) and otherwise our PGMQ-compatible SQL (each file applied and
// recorded); the commandbus files are applied and recorded either way.
struct fresh_install {
  db::pgmq_source pgmq;
  size_t applied;
  int64_t recorded;
};

fresh_install expected_fresh_install(db::connection& conn) {
  auto cb = sql::commandbus_files().size();
  if (count(conn, "SELECT count(*) FROM pg_available_extensions "
                  "WHERE name = 'pgmq'")
      > 0)
    return {db::pgmq_source::extension, 1 + cb, static_cast<int64_t>(cb)};
  auto n = sql::pgmq_files().size() + cb;
  return {db::pgmq_source::compat, n, static_cast<int64_t>(n)};
}

} // namespace

TEST(Migrate, FreshDatabaseGetsPgmqAndCommandbus) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  auto expected = expected_fresh_install(conn);
  auto report = migrate_bundled(conn);
  EXPECT_EQ(report.pgmq, expected.pgmq);
  EXPECT_EQ(report.applied.size(), expected.applied);
  if (expected.pgmq == db::pgmq_source::extension && !report.applied.empty()) {
    EXPECT_EQ(report.applied.front(), "pgmq/extension");
  }
  EXPECT_EQ(count(conn, "SELECT count(*) FROM commandbus.cmdbus_migrations"),
            expected.recorded);
  EXPECT_EQ(count(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'pgmq'"),
            expected.pgmq == db::pgmq_source::extension ? 1 : 0);
  // Both schemas are usable.
  conn.exec("SELECT pgmq.create('mig_probe')");
  EXPECT_EQ(count(conn, "SELECT count(*) FROM commandbus.command"), 0);
}

TEST(Migrate, SecondRunIsANoOp) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  migrate_bundled(conn);
  auto before = conn.exec("SELECT string_agg(component || version || applied_at::text, ',' ORDER BY component, version) FROM commandbus.cmdbus_migrations");
  auto objects_before = count(conn, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('commandbus', 'pgmq')");
  auto report = migrate_bundled(conn);
  EXPECT_TRUE(report.applied.empty());
  EXPECT_EQ(report.pgmq, expected_fresh_install(conn).pgmq);
  auto after = conn.exec("SELECT string_agg(component || version || applied_at::text, ',' ORDER BY component, version) FROM commandbus.cmdbus_migrations");
  EXPECT_EQ(before.text(0, 0), after.text(0, 0));
  EXPECT_EQ(objects_before, count(conn, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('commandbus', 'pgmq')"));
}

TEST(Migrate, ConcurrentRunsApplyEachFileOnce) {
  test::scratch_database scratch;
  auto run = [&] {
    auto conn = db::connection::open(scratch.dsn());
    return migrate_bundled(conn).applied.size();
  };
  auto a = std::async(std::launch::async, run);
  auto b = std::async(std::launch::async, run);
  auto applied_a = a.get();
  auto applied_b = b.get();
  auto conn = db::connection::open(scratch.dsn());
  auto expected = expected_fresh_install(conn);
  // One run did all the work, the other found everything applied.
  EXPECT_EQ(applied_a + applied_b, expected.applied);
  EXPECT_TRUE(applied_a == 0 || applied_b == 0);
  EXPECT_EQ(count(conn, "SELECT count(*) FROM commandbus.cmdbus_migrations"),
            expected.recorded);
}

TEST(Migrate, FailingFileIsRolledBackAndNotRecorded) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  std::vector<db::migration_file> files = sql::commandbus_files();
  files.push_back({"V900", "broken",
                   "CREATE TABLE commandbus.half_done (id int);"
                   "SELECT no_such_function_here();"});
  try {
    db::migrate(conn, sql::pgmq_files(), files);
    FAIL() << "expected the broken migration to fail";
  } catch (const db::error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("commandbus/V900__broken"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no_such_function_here"), std::string::npos) << msg;
    EXPECT_EQ(e.code(), db::errc::undefined_function);
  }
  EXPECT_TRUE(conn.exec("SELECT to_regclass('commandbus.half_done')").is_null(0, 0));
  EXPECT_EQ(count(conn, "SELECT count(*) FROM commandbus.cmdbus_migrations WHERE version = 'V900'"),
            0);
  // Everything before the broken file was applied and recorded; fixing the
  // file lets the next run continue from there.
  EXPECT_EQ(count(conn, "SELECT count(*) FROM commandbus.cmdbus_migrations WHERE component = 'commandbus'"),
            static_cast<int64_t>(sql::commandbus_files().size()));
  files.back().text = "CREATE TABLE commandbus.half_done (id int);";
  auto report = db::migrate(conn, sql::pgmq_files(), files);
  ASSERT_EQ(report.applied.size(), 1u);
  EXPECT_EQ(report.applied[0], "commandbus/V900__broken");
}

TEST(Migrate, ChangedAppliedFileIsRefused) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  std::vector<db::migration_file> files = sql::commandbus_files();
  files.push_back({"V901", "extra", "CREATE TABLE commandbus.extra (id int);"});
  db::migrate(conn, sql::pgmq_files(), files);
  files.back().text = "CREATE TABLE commandbus.extra (id bigint);";
  try {
    db::migrate(conn, sql::pgmq_files(), files);
    FAIL() << "expected a checksum mismatch";
  } catch (const db::error& e) {
    EXPECT_NE(std::string{e.what()}.find("was changed after it was applied"),
              std::string::npos)
      << e.what();
  }
}

TEST(Migrate, RefusesForeignPgmqSchema) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  conn.exec("CREATE SCHEMA pgmq; CREATE TABLE pgmq.something_else (id int)");
  try {
    migrate_bundled(conn);
    FAIL() << "expected migrate to refuse an unknown pgmq schema";
  } catch (const db::error& e) {
    EXPECT_NE(std::string{e.what()}.find("refusing to install over it"),
              std::string::npos)
      << e.what();
  }
  // Nothing of ours was installed next to it.
  EXPECT_TRUE(conn.exec("SELECT to_regclass('pgmq.meta')").is_null(0, 0));
  EXPECT_TRUE(conn.exec("SELECT to_regclass('commandbus.command')").is_null(0, 0));
}

TEST(Migrate, ChecksumIsStable) {
  EXPECT_EQ(db::migration_checksum(""), "cbf29ce484222325");
  EXPECT_NE(db::migration_checksum("a"), db::migration_checksum("b"));
}

// The comments of applied migrations were rewritten once (comment-only
// edits); a database migrated with the earlier texts recorded their
// checksums, and migrate accepts those for exactly their own version.
TEST(Migrate, AcceptsTheChecksumOfACommentOnlyEarlierText) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  migrate_bundled(conn);
  // The checksum of sql/commandbus/V004__cmdbus_worker.sql before its
  // comments were rewritten (FNV-1a of `git show main:...` at the time).
  const std::string earlier = "1e808726c07f6c3e";
  ASSERT_TRUE(db::superseded_checksum("commandbus", "V004", earlier));
  for (auto& f : sql::commandbus_files())
    if (f.version == "V004") {
      ASSERT_NE(db::migration_checksum(f.text), earlier);
    }
  conn.query("UPDATE commandbus.cmdbus_migrations SET checksum = $1"
             " WHERE component = 'commandbus' AND version = 'V004'",
             earlier);
  auto report = migrate_bundled(conn);
  EXPECT_TRUE(report.applied.empty());
  // Verifying again (a second run) accepts it as well.
  EXPECT_TRUE(migrate_bundled(conn).applied.empty());
  // Only for its own version: the same checksum recorded for V003 is a
  // changed file.
  EXPECT_FALSE(db::superseded_checksum("commandbus", "V003", earlier));
  EXPECT_FALSE(db::superseded_checksum("pgmq", "V004", earlier));
}

TEST(Migrate, RefusesAChecksumThatIsNeitherCurrentNorSuperseded) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  migrate_bundled(conn);
  conn.exec("UPDATE commandbus.cmdbus_migrations SET checksum ="
            " '0123456789abcdef' WHERE component = 'commandbus'"
            " AND version = 'V004'");
  try {
    migrate_bundled(conn);
    FAIL() << "expected a checksum mismatch";
  } catch (const db::error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("commandbus/V004"), std::string::npos) << msg;
    EXPECT_NE(msg.find("was changed after it was applied"), std::string::npos)
      << msg;
  }
}
