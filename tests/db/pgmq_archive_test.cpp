// Tests of the PGMQ layer (sql/pgmq/V001__pgmq.sql, or the pgmq extension where
// it is installed) against PGMQ 1.5's documented behaviour, the scenarios of
// upstream's test/sql/base.sql and its isolation specs plus edge cases; this
// part: delete, archive, purge, drop and metrics. Every test uses its own
// queues (test::unique_name) and drops them at the end, so tests do not depend
// on each other or on the database's history. Only the scenarios that are about
// time wait, for 1-2 s at most. Shared fixtures: tests/db/pgmq_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/pgmq_support.hpp"

using namespace cmdbus;
using db::errc;
using namespace cmdbus::pgmq_test;

// -- delete / archive ------------------------------------------------------------

TEST_F(PgmqDelete, SingleAndArray) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3', '4', '5']::jsonb[])", q);
  EXPECT_TRUE(conn.query("SELECT pgmq.delete($1::text, 1::bigint)", q).boolean(0, 0));
  EXPECT_FALSE(conn.query("SELECT pgmq.delete($1::text, 1::bigint)", q).boolean(0, 0));
  auto deleted = ints(conn.query("SELECT * FROM pgmq.delete($1::text, ARRAY[1, 2, 4, 99, -1]::bigint[])", q));
  std::sort(deleted.begin(), deleted.end());
  EXPECT_EQ(deleted, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(conn.query("SELECT * FROM pgmq.delete($1::text, ARRAY[]::bigint[])", q).rows(), 0);
  // Visibility does not matter for delete.
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 3, 100)", q);
  EXPECT_TRUE(conn.query("SELECT pgmq.delete($1::text, 3::bigint)", q).boolean(0, 0));
  EXPECT_EQ(count_rows("q_" + q), 1);
  EXPECT_EQ(count_rows("a_" + q), 0);
  EXPECT_EQ(conn.query("SELECT * FROM pgmq.delete($1::text, ARRAY[5]::bigint[])", q).column_name(0), "delete");
}

// Upstream's base.sql: archive with headers; single archive
TEST_F(PgmqArchive, ArrayThenSingleKeepHeaders) {
  auto q = new_queue();
  EXPECT_EQ(count_rows("q_" + q), 0);
  EXPECT_EQ(count_rows("a_" + q), 0);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '0'::jsonb, '{\"headers\": 1}'::jsonb)", q), 1);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '0'::jsonb)", q), 2);
  auto archived = ints(conn.query("SELECT * FROM pgmq.archive($1::text, ARRAY[1, 2]::bigint[])", q));
  std::sort(archived.begin(), archived.end());
  EXPECT_EQ(archived, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(count_rows("q_" + q), 0);
  EXPECT_EQ(count_rows("a_" + q), 2);
  EXPECT_EQ(send(q, "0"), 3);
  EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 3::bigint)", q).boolean(0, 0));
  EXPECT_FALSE(conn.query("SELECT pgmq.archive($1::text, 3::bigint)", q).boolean(0, 0));
  EXPECT_EQ(count_rows("q_" + q), 0);
  EXPECT_EQ(count_rows("a_" + q), 3);
  auto r = conn.query(
    "SELECT string_agg(msg_id || ':' || message::text || ':' || coalesce(headers::text, '-'), ' ' ORDER BY msg_id)"
    "  FROM pgmq.a_" + q);
  EXPECT_EQ(r.text(0, 0), "1:0:{\"headers\": 1} 2:0:- 3:0:-");
}

TEST_F(PgmqArchive, CopiesEveryColumn) {
  auto q = new_queue();
  send(q, "{\"k\": 1}");
  conn.query("SELECT * FROM pgmq.read($1::text, 100, 1)", q);
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 1, 200)", q);
  auto before = conn.query("SELECT msg_id, read_ct, enqueued_at::text, vt::text, message::text FROM pgmq.q_" + q);
  {
    db::transaction tx{conn};
    EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q).boolean(0, 0));
    EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.a_" + q + " WHERE archived_at = now()"), 1);
    tx.commit();
  }
  auto after = conn.query("SELECT msg_id, read_ct, enqueued_at::text, vt::text, message::text FROM pgmq.a_" + q);
  ASSERT_EQ(after.rows(), 1);
  for (int c = 0; c < 5; ++c)
    EXPECT_EQ(after.text(0, c), before.text(0, c)) << c;
  EXPECT_EQ(after.int64(0, 1), 1);
}

// Upstream's base.sql: partitioned queue with pg_partman (the non-partitioned
// part: {1,2,3,-3} with 3 deleted gives {1,2})
TEST_F(PgmqArchive, ArrayReturnsOnlyMovedIds) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3']::jsonb[])", q);
  EXPECT_EQ(scalar("SELECT queue_length FROM pgmq.metrics($1::text)", q), 3);
  EXPECT_TRUE(conn.query("SELECT pgmq.delete($1::text, 3::bigint)", q).boolean(0, 0));
  EXPECT_EQ(scalar("SELECT queue_length FROM pgmq.metrics($1::text)", q), 2);
  auto archived = conn.query("SELECT * FROM pgmq.archive($1::text, ARRAY[1, 2, 3, -3]::bigint[])", q);
  EXPECT_EQ(archived.column_name(0), "archive");
  auto ids = ints(archived);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2}));
}

// -- purge / drop ------------------------------------------------------------------

// Upstream's base.sql: purge
TEST_F(PgmqPurge, EmptiesTheQueueButNotTheArchiveOrSequence) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3', '4', '5', '6']::jsonb[])", q)), range(1, 6));
  EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 6::bigint)", q).boolean(0, 0));
  EXPECT_EQ(scalar("SELECT pgmq.purge_queue($1::text)", q), 5);
  EXPECT_EQ(count_rows("q_" + q), 0);
  EXPECT_EQ(count_rows("a_" + q), 1);
  EXPECT_EQ(send(q), 7);
  EXPECT_EQ(scalar("SELECT pgmq.purge_queue($1::text)", q), 1);
  EXPECT_EQ(scalar("SELECT pgmq.purge_queue($1::text)", q), 0);
}

// Upstream's base.sql: drop_queue return values
TEST_F(PgmqDrop, ReturnValuesAndNotice) {
  auto q = new_queue();
  send(q);
  conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q);
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue($1::text)", q).boolean(0, 0));
  EXPECT_EQ(objects_named_like(q), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE strpos(relname, $1::text) > 0", q), 0);
  conn.take_notices();
  auto missing = test::unique_name("pgone");
  EXPECT_FALSE(conn.query("SELECT pgmq.drop_queue($1::text)", missing).boolean(0, 0));
  EXPECT_EQ(conn.take_notices(), std::vector<std::string>{"pgmq queue `" + missing + "` does not exist"});
}

// Upstream's base.sql: dropping partitioned queues; dropping the rest
TEST_F(PgmqDrop, DeprecatedTwoArgumentFormWarnsAndReturnsTrue) {
  std::vector<std::string> names{new_queue(), new_queue(), new_queue()};
  conn.take_notices();
  auto r = conn.query(
    "SELECT pgmq.drop_queue(queue_name, true) FROM pgmq.list_queues() WHERE queue_name = ANY($1::text[])",
    db::array_literal(names));
  EXPECT_EQ(r.rows(), 3);
  for (int i = 0; i < r.rows(); ++i)
    EXPECT_TRUE(r.boolean(i, 0));
  const std::string warning =
    "drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. "
    "Use drop_queue(queue_name) instead";
  EXPECT_EQ(conn.take_notices(), (std::vector<std::string>{warning, warning, warning}));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.list_queues() WHERE queue_name = ANY($1::text[])", db::array_literal(names)), 0);
  for (auto& n : names)
    EXPECT_EQ(objects_named_like(n), 0);
  // Even for a missing queue it returns true (after the inner NOTICE).
  auto missing = test::unique_name("pgone");
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue($1::text, false)", missing).boolean(0, 0));
  EXPECT_EQ(conn.take_notices(), (std::vector<std::string>{warning, "pgmq queue `" + missing + "` does not exist"}));
}

// Upstream's base.sql: dropping partitioned queues, second half:
// drop_queue(name) reads the partitioned flag from meta.
// No partitioned queue can exist without pg_partman, so flag a plain one.
TEST_F(PgmqDrop, QueueFlaggedPartitionedInMetaIsDropped) {
  auto q = new_queue();
  conn.query("UPDATE pgmq.meta SET is_partitioned = true WHERE queue_name = $1::text", q);
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue($1::text)", q).boolean(0, 0));
  EXPECT_EQ(objects_named_like(q), 0);
}

TEST_F(PgmqDrop, DropsOnlyTheExactMetaRow) {
  auto base = test::unique_name("pdm");
  auto upper = track(base + "_X");
  auto lower = track(base + "_x");
  conn.query("SELECT pgmq.create($1::text)", upper);
  conn.query("SELECT pgmq.create($1::text)", lower);
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue($1::text)", upper).boolean(0, 0));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", lower), 1);
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", upper), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE tablename = $1::text", "q_" + lower), 0);
}

// -- introspection -----------------------------------------------------------------

// Upstream's base.sql: metrics
TEST_F(PgmqMetrics, CountsAndAges) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3', '4', '5']::jsonb[])", q)), range(1, 5));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['6', '7']::jsonb[], 10)", q)), range(6, 7));
  EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q).boolean(0, 0));
  auto m = conn.query("SELECT * FROM pgmq.metrics($1::text)", q);
  ASSERT_EQ(m.rows(), 1);
  ASSERT_EQ(m.columns(), 7);
  const std::vector<std::string> names{"queue_name", "queue_length", "newest_msg_age_sec", "oldest_msg_age_sec",
                                       "total_messages", "scrape_time", "queue_visible_length"};
  for (int c = 0; c < 7; ++c)
    EXPECT_EQ(m.column_name(c), names[c]);
  EXPECT_EQ(m.text(0, 0), q);
  EXPECT_EQ(m.int64(0, 1), 6);
  EXPECT_EQ(m.int64(0, 2), 0);
  EXPECT_EQ(m.int64(0, 3), 0);
  EXPECT_EQ(m.int64(0, 4), 7);
  EXPECT_EQ(m.int64(0, 6), 4);
  {
    db::transaction tx{conn};
    EXPECT_TRUE(conn.query("SELECT scrape_time = now() FROM pgmq.metrics($1::text)", q).boolean(0, 0));
  }
}

TEST_F(PgmqMetrics, EmptyQueue) {
  auto q = new_queue();
  auto m = conn.query("SELECT * FROM pgmq.metrics($1::text)", q);
  EXPECT_EQ(m.int64(0, 1), 0);
  EXPECT_TRUE(m.is_null(0, 2));
  EXPECT_TRUE(m.is_null(0, 3));
  EXPECT_EQ(m.int64(0, 4), 0);
  EXPECT_EQ(m.int64(0, 6), 0);
  // Ages are whole seconds from enqueued_at.
  send(q);
  conn.exec("UPDATE pgmq.q_" + q + " SET enqueued_at = now() - interval '90.6 s'");
  m = conn.query("SELECT newest_msg_age_sec, oldest_msg_age_sec FROM pgmq.metrics($1::text)", q);
  EXPECT_EQ(m.int64(0, 0), 91);
  EXPECT_EQ(m.int64(0, 1), 91);
}

// Upstream's base.sql, metrics_all; dropping the rest: on a fresh install, so
// that the set of queues is known.
TEST(PgmqFreshInstall, MetricsAllThenDropEverythingWithTheDeprecatedForm) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  db::migrate(conn, sql::pgmq_files(), sql::commandbus_files());
  ASSERT_EQ(conn.exec("SELECT count(*) FROM pgmq.list_queues()").int64(0, 0), 0);
  const std::vector<std::string> names{"test_a", "test-b", "TestC"};
  for (auto& n : names)
    conn.query("SELECT pgmq.create($1::text)", n);
  conn.query("SELECT pgmq.create_unlogged($1::text)", std::string{"test_unlogged"});
  conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2']::jsonb[])", names[1]);
  auto all = conn.exec("SELECT queue_name, queue_length FROM pgmq.metrics_all()");
  ASSERT_EQ(all.rows(), 4);
  const std::vector<std::string> in_meta_order{"test_a", "test-b", "TestC", "test_unlogged"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(all.text(i, 0), in_meta_order[i]);
    EXPECT_EQ(all.int64(i, 1), i == 1 ? 2 : 0);
  }
  conn.take_notices();
  auto dropped = conn.exec("SELECT pgmq.drop_queue(queue_name, true) FROM pgmq.list_queues()");
  ASSERT_EQ(dropped.rows(), 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(dropped.boolean(i, 0));
  auto notices = conn.take_notices();
  EXPECT_EQ(notices.size(), 4u);
  for (auto& n : notices)
    EXPECT_EQ(n, "drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. "
                 "Use drop_queue(queue_name) instead");
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pgmq.list_queues()").int64(0, 0), 0);
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq'").int64(0, 0), 1); // meta
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pgmq.metrics_all()").int64(0, 0), 0);
}

TEST_F(PgmqMetrics, ListQueuesColumns) {
  auto q = new_queue();
  auto u = track(test::unique_name("plu"));
  conn.query("SELECT pgmq.create_unlogged($1::text)", u);
  auto r = conn.query("SELECT * FROM pgmq.list_queues() WHERE queue_name IN ($1::text, $2::text) ORDER BY is_unlogged", q, u);
  ASSERT_EQ(r.columns(), 4);
  EXPECT_EQ(r.column_name(0), "queue_name");
  EXPECT_EQ(r.column_name(1), "is_partitioned");
  EXPECT_EQ(r.column_name(2), "is_unlogged");
  EXPECT_EQ(r.column_name(3), "created_at");
  ASSERT_EQ(r.rows(), 2);
  EXPECT_EQ(r.text(0, 0), q);
  EXPECT_FALSE(r.boolean(0, 1));
  EXPECT_FALSE(r.boolean(0, 2));
  EXPECT_EQ(r.text(1, 0), u);
  EXPECT_TRUE(r.boolean(1, 2));
}
