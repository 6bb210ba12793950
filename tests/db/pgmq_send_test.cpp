// Tests of the PGMQ layer (sql/pgmq/V001__pgmq.sql, or the pgmq extension where
// it is installed) against PGMQ 1.5's documented behaviour, the scenarios of
// upstream's test/sql/base.sql and its isolation specs plus edge cases; this
// part: sending. Every test uses its own queues (test::unique_name) and drops
// them at the end, so tests do not depend on each other or on the database's
// history. Only the scenarios that are about time wait, for 1-2 s at most.
// Shared fixtures: tests/db/pgmq_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/pgmq_support.hpp"

using namespace cmdbus;
using db::errc;
using namespace cmdbus::pgmq_test;

// -- sending --------------------------------------------------------------------

TEST_F(PgmqSend, AllOverloadsSetVtAndHeaders) {
  auto q = new_queue();
  auto b = conn.exec("SELECT clock_timestamp()::text").opt_text(0, 0).value();
  // (msg) / (msg, headers) / (msg, delay int) / (msg, delay ts) /
  // (msg, headers, delay int) / (msg, headers, delay ts)
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '1'::jsonb)", q), 1);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '2'::jsonb, '{\"h\": 2}'::jsonb)", q), 2);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '3'::jsonb, 100)", q), 3);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '4'::jsonb, '2100-01-01 00:00:00+00'::timestamptz)", q), 4);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '5'::jsonb, '{\"h\": 5}'::jsonb, 200)", q), 5);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '6'::jsonb, '{\"h\": 6}'::jsonb, '2100-01-02 00:00:00+00'::timestamptz)", q), 6);
  auto after = conn.exec("SELECT clock_timestamp()::text").opt_text(0, 0).value();
  auto r = conn.query(
    "SELECT msg_id, message::text, headers::text, read_ct,"
    "       CASE msg_id"
    "         WHEN 1 THEN vt BETWEEN $1::timestamptz AND $2::timestamptz"
    "         WHEN 2 THEN vt BETWEEN $1::timestamptz AND $2::timestamptz"
    "         WHEN 3 THEN vt BETWEEN $1::timestamptz + interval '100 s' AND $2::timestamptz + interval '100 s'"
    "         WHEN 4 THEN vt = '2100-01-01 00:00:00+00'"
    "         WHEN 5 THEN vt BETWEEN $1::timestamptz + interval '200 s' AND $2::timestamptz + interval '200 s'"
    "         WHEN 6 THEN vt = '2100-01-02 00:00:00+00'"
    "       END"
    "  FROM pgmq.q_" + q + " ORDER BY msg_id",
    b, after);
  ASSERT_EQ(r.rows(), 6);
  const std::vector<std::optional<std::string>> headers{
    std::nullopt, "{\"h\": 2}", std::nullopt, std::nullopt, "{\"h\": 5}", "{\"h\": 6}"};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(i + 1);
    EXPECT_EQ(r.int64(i, 0), i + 1);
    EXPECT_EQ(r.text(i, 1), std::to_string(i + 1));
    EXPECT_EQ(r.opt_text(i, 2), headers[i]);
    EXPECT_EQ(r.int64(i, 3), 0);
    EXPECT_TRUE(r.boolean(i, 4));
  }
  // Only the two immediate ones are visible.
  EXPECT_EQ(read_ids(q, 0, 10), (std::vector<int64_t>{1, 2}));
}

TEST_F(PgmqSend, ResultColumnIsNamedSend) {
  auto q = new_queue();
  auto r = conn.query("SELECT * FROM pgmq.send($1::text, '{}'::jsonb)", q);
  EXPECT_EQ(r.column_name(0), "send");
  auto b = conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['{}']::jsonb[])", q);
  EXPECT_EQ(b.column_name(0), "send_batch");
  EXPECT_EQ(conn.query("SELECT send AS msg_id FROM pgmq.send($1::text, '{}'::jsonb)", q).int64(0, 0), 3);
}

TEST_F(PgmqSend, NamedNotationLikePgmqRs) {
  auto q = track(test::unique_name("pnn"));
  conn.query("SELECT pgmq.create(queue_name => $1::text)", q);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send(queue_name => $1::text, msg => '{\"a\": 1}'::jsonb, delay => 0::integer)", q), 1);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send(queue_name => $1::text, msg => '{\"a\": 2}'::jsonb, headers => '{}'::jsonb, delay => 0::integer)", q), 2);
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch(queue_name => $1::text, msgs => ARRAY['3', '4']::jsonb[], delay => 0::integer)", q)),
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read(queue_name => $1::text, vt => 30, qty => 2)", q)),
            (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read_with_poll(queue_name => $1::text, vt => 30, qty => 1, max_poll_seconds => 1, poll_interval_ms => 10)", q)),
            (std::vector<int64_t>{3}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.set_vt(queue_name => $1::text, msg_id => 1::bigint, vt => 0)", q)),
            (std::vector<int64_t>{1}));
  EXPECT_TRUE(conn.query("SELECT pgmq.delete(queue_name => $1::text, msg_id => 1::bigint)", q).boolean(0, 0));
  EXPECT_TRUE(conn.query("SELECT pgmq.archive(queue_name => $1::text, msg_id => 2::bigint)", q).boolean(0, 0));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.archive(queue_name => $1::text, msg_ids => ARRAY[3]::bigint[])", q)),
            (std::vector<int64_t>{3}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.delete(queue_name => $1::text, msg_ids => ARRAY[4]::bigint[])", q)),
            (std::vector<int64_t>{4}));
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue(queue_name => $1::text)", q).boolean(0, 0));
}

// Upstream's base.sql: NULL message
TEST_F(PgmqSend, NullMessage) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, NULL::jsonb)", q), 1);
  auto m = conn.query("SELECT msg_id, read_ct, message FROM pgmq.read($1::text, 1, 1)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.int64(0, 0), 1);
  EXPECT_EQ(m.int64(0, 1), 1);
  EXPECT_TRUE(m.is_null(0, 2));
}

TEST_F(PgmqSend, NegativeDelayIsVisibleAtOnce) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '1'::jsonb, -10)", q), 1);
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE vt < now()"), 1);
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['2']::jsonb[], -5)", q)),
            std::vector<int64_t>{2});
  EXPECT_EQ(read_ids(q, 10, 10), (std::vector<int64_t>{1, 2}));
}

TEST_F(PgmqSend, NullTimestampDelayViolatesNotNull) {
  auto q = new_queue();
  try {
    conn.query("SELECT * FROM pgmq.send($1::text, '1'::jsonb, NULL::timestamptz)", q);
    ADD_FAILURE() << "NULL vt accepted";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "23502");
  }
}

TEST_F(PgmqSend, UntypedThirdArgumentIsAmbiguous) {
  auto q = new_queue();
  try {
    conn.exec("SELECT * FROM pgmq.send('" + q + "', '1', NULL)");
    ADD_FAILURE() << "ambiguous call resolved";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "42725");
    EXPECT_EQ(std::string{e.what()}, "function pgmq.send(unknown, unknown, unknown) is not unique");
  }
  // An integer literal picks the integer overload.
  EXPECT_EQ(conn.exec("SELECT * FROM pgmq.send('" + q + "', '1', 0)").int64(0, 0), 1);
}

TEST_F(PgmqSend, EnqueuedAtIsTransactionStartAndIdsAreNotReused) {
  auto q = new_queue();
  {
    db::transaction tx{conn};
    auto start = conn.exec("SELECT now()::text").opt_text(0, 0).value();
    conn.exec("SELECT pg_sleep(0.05)");
    auto id = send(q);
    EXPECT_EQ(id, 1);
    EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE enqueued_at = $1::timestamptz AND vt > enqueued_at", start),
              1);
  } // rolled back: id 1 is gone for good
  EXPECT_EQ(send(q), 2);
  EXPECT_EQ(conn.query("SELECT total_messages FROM pgmq.metrics($1::text)", q).int64(0, 0), 2);
}

TEST_F(PgmqSend, UnknownQueueIsUndefinedTable) {
  auto q = test::unique_name("pnone");
  auto msg = "relation \"pgmq.q_" + q + "\" does not exist";
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.send($1::text, '1'::jsonb)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1']::jsonb[])", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.read($1::text, 1, 1)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.read_with_poll($1::text, 1, 1, 1, 10)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.pop($1::text)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.set_vt($1::text, 1, 1)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.delete($1::text, 1::bigint)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.delete($1::text, ARRAY[1]::bigint[])", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.purge_queue($1::text)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.metrics($1::text)", q), errc::undefined_table, msg);
  auto hyphen = q + "-x";
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.send($1::text, '1'::jsonb)", hyphen), errc::undefined_table,
                  "relation \"pgmq.q_" + hyphen + "\" does not exist");
}

// Upstream's base.sql: send_batch with headers
TEST_F(PgmqSendBatch, WithHeaders) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['{\"hello\": \"world_0\"}', '{\"hello\": \"world_1\"}']::jsonb[],"
                            " ARRAY['{\"header\": 1}', '{\"header\": 2}']::jsonb[])", q)),
            (std::vector<int64_t>{1, 2}));
  auto m = conn.query("SELECT msg_id, message::text, headers::text FROM pgmq.read($1::text, 0, 2)", q);
  ASSERT_EQ(m.rows(), 2);
  EXPECT_EQ(m.int64(0, 0), 1);
  EXPECT_EQ(m.text(0, 1), "{\"hello\": \"world_0\"}");
  EXPECT_EQ(m.text(0, 2), "{\"header\": 1}");
  EXPECT_EQ(m.int64(1, 0), 2);
  EXPECT_EQ(m.text(1, 1), "{\"hello\": \"world_1\"}");
  EXPECT_EQ(m.text(1, 2), "{\"header\": 2}");
}

// Upstream's base.sql: send_batch with a timestamptz delay
TEST_F(PgmqSendBatch, WithTimestampDelay) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2']::jsonb[], CURRENT_TIMESTAMP + interval '5 seconds')", q)),
            (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(read_ids(q, 0, 10).empty());
  EXPECT_EQ(scalar("SELECT count(DISTINCT vt) FROM pgmq.q_" + q), 1);
}

TEST_F(PgmqSendBatch, AllOverloadsAndOneVtPerBatch) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3']::jsonb[])", q)),
            (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['4', '5']::jsonb[], 100)", q)),
            (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['6']::jsonb[], '2100-01-01 00:00:00+00'::timestamptz)", q)),
            (std::vector<int64_t>{6}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['7', '8']::jsonb[], ARRAY['{\"h\": 7}', '{\"h\": 8}']::jsonb[], 100)", q)),
            (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['9']::jsonb[], ARRAY['{\"h\": 9}']::jsonb[], '2100-01-01 00:00:00+00'::timestamptz)", q)),
            (std::vector<int64_t>{9}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY[]::jsonb[])", q)), std::vector<int64_t>{});
  auto r = conn.query(
    "SELECT string_agg(msg_id || ':' || message::text || ':' || coalesce(headers::text, '-') || ':' || read_ct, ' ' ORDER BY msg_id),"
    "       count(DISTINCT vt) FILTER (WHERE msg_id BETWEEN 1 AND 3),"
    "       count(DISTINCT vt) FILTER (WHERE msg_id BETWEEN 4 AND 5),"
    "       bool_and(vt > now() + interval '90 s') FILTER (WHERE msg_id IN (4, 5, 7, 8)),"
    "       bool_and(vt = '2100-01-01 00:00:00+00') FILTER (WHERE msg_id IN (6, 9))"
    "  FROM pgmq.q_" + q);
  EXPECT_EQ(r.text(0, 0), "1:1:-:0 2:2:-:0 3:3:-:0 4:4:-:0 5:5:-:0 6:6:-:0 7:7:{\"h\": 7}:0 8:8:{\"h\": 8}:0 9:9:{\"h\": 9}:0");
  EXPECT_EQ(r.int64(0, 1), 1);
  EXPECT_EQ(r.int64(0, 2), 1);
  EXPECT_TRUE(r.boolean(0, 3));
  EXPECT_TRUE(r.boolean(0, 4));
}

TEST_F(PgmqSendBatch, HeadersArraysOfUnequalLength) {
  auto q = new_queue();
  // Shorter headers: the rest are NULL.
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['\"a\"', '\"b\"', '\"c\"']::jsonb[], ARRAY['{\"h\": 1}']::jsonb[])", q)),
            (std::vector<int64_t>{1, 2, 3}));
  // NULL headers array: all NULL.
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['\"d\"']::jsonb[], NULL::jsonb[])", q)),
            (std::vector<int64_t>{4}));
  // Longer headers: extra rows with a NULL message (upstream quirk).
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['\"e\"']::jsonb[], ARRAY['{\"h\": 5}', '{\"h\": 6}']::jsonb[], 0)", q)),
            (std::vector<int64_t>{5, 6}));
  auto r = conn.query(
    "SELECT string_agg(msg_id || ':' || coalesce(message::text, '-') || ':' || coalesce(headers::text, '-'), ' ' ORDER BY msg_id)"
    "  FROM pgmq.q_" + q);
  EXPECT_EQ(r.text(0, 0), "1:\"a\":{\"h\": 1} 2:\"b\":- 3:\"c\":- 4:\"d\":- 5:\"e\":{\"h\": 5} 6:-:{\"h\": 6}");
}

TEST_F(PgmqSendBatch, LargeBatchKeepsArrayOrder) {
  auto q = new_queue();
  auto r = conn.query(
    "SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g) ORDER BY g) FROM generate_series(1, 1000) g))", q);
  EXPECT_EQ(ints(r), range(1, 1000));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE message <> to_jsonb(msg_id)"), 0);
}
