// Tests of the PGMQ layer (sql/pgmq/V001__pgmq.sql, or the pgmq extension where
// it is installed) against PGMQ 1.5's documented behaviour, the scenarios of
// upstream's test/sql/base.sql and its isolation specs plus edge cases; this
// part: queue management, queue names and partitioned queues. Every test uses
// its own queues (test::unique_name) and drops them at the end, so tests do not
// depend on each other or on the database's history. Only the scenarios that
// are about time wait, for 1-2 s at most. Shared fixtures:
// tests/db/pgmq_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/pgmq_support.hpp"

using namespace cmdbus;
using db::errc;
using namespace cmdbus::pgmq_test;

// -- queue management ---------------------------------------------------------

// Upstream's base.sql: create_unlogged
TEST_F(PgmqCreate, UnloggedQueueSendsAndReadsWithHeaders) {
  auto q = track(test::unique_name("pu"));
  auto r = conn.query("SELECT pgmq.create_unlogged($1::text)", q);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.text(0, 0), ""); // void
  auto meta = conn.query("SELECT is_partitioned, is_unlogged FROM pgmq.meta WHERE queue_name = $1::text", q);
  ASSERT_EQ(meta.rows(), 1);
  EXPECT_FALSE(meta.boolean(0, 0));
  EXPECT_TRUE(meta.boolean(0, 1));
  auto persistence = conn.query(
    "SELECT relname, relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = 'pgmq' AND relname IN ($1::text, $2::text) ORDER BY relname",
    "a_" + q, "q_" + q);
  ASSERT_EQ(persistence.rows(), 2);
  EXPECT_EQ(persistence.text(0, 1), "p"); // the archive stays logged
  EXPECT_EQ(persistence.text(1, 1), "u");

  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '{\"hello\": \"world\"}'::jsonb, '{\"header\": 1}'::jsonb)", q), 1);
  auto m = conn.query(
    "SELECT msg_id, read_ct, vt > now(), message::text, headers::text FROM pgmq.read($1::text, 2, 1)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.int64(0, 0), 1);
  EXPECT_EQ(m.int64(0, 1), 1);
  EXPECT_TRUE(m.boolean(0, 2));
  EXPECT_EQ(m.text(0, 3), "{\"hello\": \"world\"}");
  EXPECT_EQ(m.text(0, 4), "{\"header\": 1}");
}

TEST_F(PgmqCreate, UnloggedOverAnExistingLoggedQueueChangesNothing) {
  auto q = new_queue();
  conn.query("SELECT pgmq.create_unlogged($1::text)", q);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE relname = $1::text AND relpersistence = 'p'", "q_" + q), 1);
  auto meta = conn.query("SELECT is_unlogged FROM pgmq.meta WHERE queue_name = $1::text", q);
  ASSERT_EQ(meta.rows(), 1);
  EXPECT_FALSE(meta.boolean(0, 0));
}

// Upstream's base.sql: idempotent create
TEST_F(PgmqCreate, SecondCreateIsANoOpWithFourNotices) {
  auto q = new_queue();
  send(q);
  auto created_at = conn.query("SELECT created_at::text FROM pgmq.meta WHERE queue_name = $1::text", q).opt_text(0, 0);
  conn.take_notices();
  conn.query("SELECT pgmq.create($1::text)", q);
  EXPECT_EQ(conn.take_notices(),
            (std::vector<std::string>{
              "relation \"q_" + q + "\" already exists, skipping",
              "relation \"a_" + q + "\" already exists, skipping",
              "relation \"q_" + q + "_vt_idx\" already exists, skipping",
              "relation \"archived_at_idx_" + q + "\" already exists, skipping",
            }));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", q), 1);
  EXPECT_EQ(conn.query("SELECT created_at::text FROM pgmq.meta WHERE queue_name = $1::text", q).opt_text(0, 0),
            created_at);
  EXPECT_EQ(count_rows("q_" + q), 1); // messages kept
  // create_non_partitioned is the same function.
  conn.query("SELECT pgmq.create_non_partitioned($1::text)", q);
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", q), 1);
}

TEST_F(PgmqCreate, CreateNonPartitionedMakesAQueue) {
  auto q = track(test::unique_name("pn"));
  conn.query("SELECT pgmq.create_non_partitioned($1::text)", q);
  EXPECT_EQ(send(q), 1);
  EXPECT_EQ(read_ids(q, 0, 1), std::vector<int64_t>{1});
}

// Upstream's base.sql: transactional create
TEST_F(PgmqCreate, CreateInARolledBackTransactionLeavesNothing) {
  auto q = test::unique_name("pt");
  {
    db::transaction tx{conn};
    conn.query("SELECT pgmq.create($1::text)", q);
    EXPECT_EQ(objects_named_like(q), 3);
  } // rollback
  EXPECT_EQ(objects_named_like(q), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE strpos(relname, $1::text) > 0", q), 0);
}

TEST_F(PgmqCreate, CreateAndDropTakeTheQueueAdvisoryLock) {
  auto q = track(test::unique_name("pl"));
  const std::string held =
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    "   AND granted AND mode = 'ExclusiveLock'"
    "   AND classid = ((hashtext('pgmq.queue_' || $1::text)::bigint >> 32) & 4294967295)::oid"
    "   AND objid = (hashtext('pgmq.queue_' || $1::text)::bigint & 4294967295)::oid";
  for (const char* fn : {"create", "create_unlogged", "drop_queue"}) {
    SCOPED_TRACE(fn);
    db::transaction tx{conn};
    EXPECT_EQ(scalar(held, q), 0);
    conn.query(std::string{"SELECT pgmq."} + fn + "($1::text)", q);
    EXPECT_EQ(scalar(held, q), 1);
    tx.commit();
    EXPECT_EQ(scalar(held, q), 0); // transaction-scoped
  }
  // acquire_queue_lock itself.
  db::transaction tx{conn};
  conn.query("SELECT pgmq.acquire_queue_lock($1::text)", q);
  EXPECT_EQ(scalar(held, q), 1);
}

// Upstream's base.sql: detach_archive (SQL-only install: detach_archive does
// nothing)
TEST_F(PgmqCreate, DetachArchiveIsANoOpAndTheArchiveStays) {
  auto q = new_queue();
  auto r = conn.query("SELECT pgmq.detach_archive($1::text)", q);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.text(0, 0), ""); // void
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' AND tablename = $1::text", "a_" + q), 1);
  auto id = send(q, "{\"a\": 1}");
  EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, $2::bigint)", q, id).boolean(0, 0));
  EXPECT_EQ(count_rows("a_" + q), 1);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.detach_archive($1::text)", q + "$"), errc::raise_exception,
                  invalid_chars_msg);
}

// Upstream's base.sql: hyphens and upper case
TEST_F(PgmqCreate, HyphenatedAndUpperCaseNamesWork) {
  auto base = test::unique_name("ph");
  for (auto q : {track(base + "-hyphened"), track(base + "_QueueCased")}) {
    SCOPED_TRACE(q);
    conn.query("SELECT pgmq.create($1::text)", q);
    std::string lower = q;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' AND tablename IN ($1::text, $2::text)",
                     "q_" + lower, "a_" + lower),
              2);
    // The archive index keeps the raw name.
    EXPECT_EQ(scalar("SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgmq' AND indexname = $1::text",
                     "archived_at_idx_" + q),
              1);
    EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '{\"hello\": \"world\"}'::jsonb)", q), 1);
    auto m = conn.query("SELECT msg_id, read_ct, message::text FROM pgmq.read($1::text, 1, 1)", q);
    ASSERT_EQ(m.rows(), 1);
    EXPECT_EQ(m.int64(0, 0), 1);
    EXPECT_EQ(m.int64(0, 1), 1);
    EXPECT_EQ(m.text(0, 2), "{\"hello\": \"world\"}");
    EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q).boolean(0, 0));
    // metrics echoes the name as passed.
    EXPECT_EQ(conn.query("SELECT queue_name FROM pgmq.metrics($1::text)", q).opt_text(0, 0), q);
  }
  for (auto q : {base + "-hyphened-part", base + "_QueueCasedPart"}) {
    EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_partitioned($1::text)", q), errc::raise_exception, partman_msg);
  }
}

TEST_F(PgmqCreate, CaseVariantsShareTablesButNotMetaRows) {
  auto base = test::unique_name("pc");
  auto upper = track(base + "_ABC");
  auto lower = track(base + "_abc");
  conn.query("SELECT pgmq.create($1::text)", upper);
  conn.query("SELECT pgmq.create($1::text)", lower); // tables exist already
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name IN ($1::text, $2::text)", upper, lower), 2);
  EXPECT_EQ(send(upper), 1);
  EXPECT_EQ(send(lower), 2);
}

// -- queue names ----------------------------------------------------------------

// Upstream's base.sql: name length
TEST_F(PgmqQueueName, AtMost47Characters) {
  auto base = test::unique_name("pln");
  auto name48 = pad_to(base, 48);
  auto name47 = track(pad_to(base, 47));
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create($1::text)", name48), errc::raise_exception, too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_unlogged($1::text)", name48), errc::raise_exception, too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_non_partitioned($1::text)", name48), errc::raise_exception,
                  too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.validate_queue_name($1::text)", name48), errc::raise_exception,
                  too_long_msg);
  EXPECT_EQ(objects_named_like(name48), 0);
  conn.query("SELECT pgmq.create($1::text)", name47);
  EXPECT_EQ(objects_named_like(name47), 3);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_indexes WHERE indexname = $1::text", "archived_at_idx_" + name47), 1);
  EXPECT_EQ(send(name47), 1);
  EXPECT_EQ(conn.query("SELECT total_messages FROM pgmq.metrics($1::text)", name47).int64(0, 0), 1);
  // create_partitioned checks the length before pg_partman.
  auto p48 = pad_to(test::unique_name("plp"), 48, 'p');
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_partitioned($1::text)", p48), errc::raise_exception, too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_partitioned($1::text)", p48.substr(0, 47)), errc::raise_exception,
                  partman_msg);
  // The message functions do not check the length.
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.send($1::text, '1'::jsonb)", name48), errc::undefined_table,
                  "relation \"pgmq.q_" + name48 + "\" does not exist");
}

TEST_F(PgmqQueueName, LengthCountsCharactersNotBytes) {
  std::string e_acute = "\xc3\xa9";
  std::string name47, name48;
  for (int i = 0; i < 47; ++i)
    name47 += e_acute;
  name48 = name47 + e_acute;
  EXPECT_NO_THROW(conn.query("SELECT pgmq.validate_queue_name($1::text)", name47));
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.validate_queue_name($1::text)", name48), errc::raise_exception,
                  too_long_msg);
}

TEST_F(PgmqQueueName, BadNamesGiveTheClearErrorAndCreateNothing) {
  auto token = test::unique_name("pbad");
  const std::vector<std::string> bad{
    token + "'quote", token + ";semi", token + "--dash", token + "$dollar",
    token + "a;drop table pgmq.meta", "x'" + token,
  };
  for (auto& name : bad) {
    for (const char* fn : {"create", "create_unlogged", "create_non_partitioned", "create_partitioned"}) {
      SCOPED_TRACE(std::string{fn} + " " + name);
      EXPECT_PG_ERROR(conn.query(std::string{"SELECT pgmq."} + fn + "($1::text)", name), errc::raise_exception,
                      invalid_chars_msg);
    }
  }
  // Too long, alone and together with a bad character (characters win).
  auto too_long = pad_to(token, 60);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create($1::text)", too_long), errc::raise_exception, too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create($1::text)", too_long + "$"), errc::raise_exception,
                  invalid_chars_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_partitioned($1::text)", too_long + "$"), errc::raise_exception,
                  invalid_chars_msg);
  EXPECT_EQ(objects_named_like(token), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE strpos(relname, $1::text) > 0", token), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'meta' AND schemaname = 'pgmq'"), 1);
}

// Upstream's base.sql: injection attempt
TEST_F(PgmqQueueName, InjectionAttemptRunsNothing) {
  auto token = test::unique_name("pinj");
  auto evil = "x; CREATE TABLE pgmq." + token + " (id int); --";
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.delete($1::text, 1::bigint)", evil), errc::raise_exception,
                  invalid_chars_msg);
  for (const char* sql : {"SELECT pgmq.send($1::text, '1'::jsonb)", "SELECT * FROM pgmq.read($1::text, 1, 1)",
                          "SELECT pgmq.archive($1::text, 1::bigint)", "SELECT pgmq.purge_queue($1::text)",
                          "SELECT pgmq.drop_queue($1::text)", "SELECT * FROM pgmq.metrics($1::text)",
                          "SELECT * FROM pgmq.pop($1::text)", "SELECT * FROM pgmq.set_vt($1::text, 1, 1)"}) {
    SCOPED_TRACE(sql);
    EXPECT_PG_ERROR(conn.query(sql, evil), errc::raise_exception, invalid_chars_msg);
  }
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE strpos(relname, $1::text) > 0", token), 0);
}

// Upstream's base.sql: invalid names on create
TEST_F(PgmqQueueName, DollarSignOnCreateIsRejected) {
  EXPECT_PG_ERROR(conn.exec("SELECT pgmq.create('dollar$-signed')"), errc::raise_exception, invalid_chars_msg);
  EXPECT_PG_ERROR(conn.exec("SELECT pgmq.create_partitioned('dollar$-signed-part')"), errc::raise_exception,
                  invalid_chars_msg);
  EXPECT_EQ(objects_named_like("dollar$"), 0);
}

// Upstream's base.sql: format_table_name, valid names
TEST_F(PgmqQueueName, FormatTableNameOfValidNames) {
  auto r = conn.exec(
    "SELECT pgmq.format_table_name('cat', 'q'), pgmq.format_table_name('cat-dog', 'a'),"
    "       pgmq.format_table_name('cat_dog', 'q'), pgmq.format_table_name('Cat.Dog Bird', 'Q'),"
    "       pgmq.format_table_name('', 'a')");
  EXPECT_EQ(r.text(0, 0), "q_cat");
  EXPECT_EQ(r.text(0, 1), "a_cat-dog");
  EXPECT_EQ(r.text(0, 2), "q_cat_dog");
  EXPECT_EQ(r.text(0, 3), "q_cat.dog bird");
  EXPECT_EQ(r.text(0, 4), "a_");
}

// Upstream's base.sql: format_table_name, invalid names
TEST_F(PgmqQueueName, FormatTableNameOfInvalidNames) {
  for (const char* name : {"dollar$fail", "double--hyphen-fail", "semicolon;fail", "single'quote-fail"}) {
    SCOPED_TRACE(name);
    EXPECT_PG_ERROR(conn.query("SELECT pgmq.format_table_name($1::text, 'q')", name), errc::raise_exception,
                    invalid_chars_msg);
  }
  // The exact text has a backslash before the final quote.
  EXPECT_EQ(std::string{invalid_chars_msg}.substr(std::string{invalid_chars_msg}.size() - 2), "\\'");
}

TEST_F(PgmqQueueName, UnicodeNameIsAcceptedLikePgmq) {
  auto q = track("\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xc3\xa9" "_" + test::unique_name("pu")); // "ünïcödé_..."
  conn.query("SELECT pgmq.create($1::text)", q);
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", q), 1);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' AND tablename IN ('q_' || lower($1::text), 'a_' || lower($1::text))", q), 2);
  EXPECT_EQ(send(q, "{\"x\": \"\xe2\x82\xac\"}"), 1);
  auto m = conn.query("SELECT msg_id, message->>'x' FROM pgmq.read($1::text, 0, 1)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.text(0, 1), "\xe2\x82\xac");
  EXPECT_EQ(conn.query("SELECT queue_length FROM pgmq.metrics($1::text)", q).int64(0, 0), 1);
}

TEST_F(PgmqQueueName, NullNameFails) {
  try {
    conn.exec("SELECT pgmq.create(NULL)");
    ADD_FAILURE() << "NULL queue name accepted";
  } catch (const db::error& e) {
    EXPECT_EQ(std::string{e.what()}, "null values cannot be formatted as an SQL identifier");
  }
}

// -- partitioned queues (no pg_partman here) --------------------------------------

// Upstream's base.sql: create_partitioned variants; partitioned queue without
// pg_partman; partitioned queue with pg_partman; convert_archive_partitioned,
// 46-char name; convert_archive_partitioned, 47-char name
TEST_F(PgmqPartitioned, RequirePgPartman) {
  ASSERT_EQ(conn.exec("SELECT count(*) FROM pg_extension WHERE extname = 'pg_partman'").int64(0, 0), 0);
  auto q = test::unique_name("ppart");
  for (const char* sql :
       {"SELECT pgmq.create_partitioned($1::text)", "SELECT pgmq.create_partitioned($1::text, '2', '2')",
        "SELECT pgmq.create_partitioned($1::text, '5 seconds', '10 seconds')",
        "SELECT pgmq.create_partitioned(queue_name => $1::text, partition_interval => '10 seconds', retention_interval => '20 seconds')",
        "SELECT pgmq.convert_archive_partitioned($1::text)",
        "SELECT pgmq.convert_archive_partitioned(table_name => $1::text, partition_interval => '10000', retention_interval => '100000', leading_partition => 10)"}) {
    SCOPED_TRACE(sql);
    EXPECT_PG_ERROR(conn.query(sql, q), errc::raise_exception, partman_msg);
  }
  EXPECT_PG_ERROR(conn.exec("SELECT pgmq._ensure_pg_partman_installed()"), errc::raise_exception, partman_msg);
  EXPECT_EQ(objects_named_like(q), 0);
  // convert_archive_partitioned of an existing queue changes nothing.
  auto existing = new_queue();
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.convert_archive_partitioned($1::text)", existing), errc::raise_exception,
                  partman_msg);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE relname = $1::text AND relkind = 'r'", "a_" + existing), 1);
}

TEST_F(PgmqPartitioned, Helpers) {
  auto r = conn.exec(
    "SELECT pgmq._get_partition_col('10000'), pgmq._get_partition_col('5 seconds'),"
    "       pgmq._get_partition_col('daily'), pgmq._get_pg_partman_schema() IS NULL,"
    "       pgmq._get_pg_partman_major_version() IS NULL, pgmq._extension_exists('plpgsql'),"
    "       pgmq._extension_exists('pg_partman'), pgmq._belongs_to_pgmq('meta')");
  EXPECT_EQ(r.text(0, 0), "msg_id");
  EXPECT_EQ(r.text(0, 1), "enqueued_at");
  EXPECT_EQ(r.text(0, 2), "enqueued_at");
  EXPECT_TRUE(r.boolean(0, 3));
  EXPECT_TRUE(r.boolean(0, 4));
  EXPECT_TRUE(r.boolean(0, 5));
  EXPECT_FALSE(r.boolean(0, 6));
  // pgmq.meta belongs to the pgmq extension when migrate installed it, and
  // to no extension with our PGMQ-compatible SQL.
  auto extension = conn.exec("SELECT count(*) FROM pg_extension WHERE extname = 'pgmq'").int64(0, 0) > 0;
  EXPECT_EQ(r.boolean(0, 7), extension);
}
