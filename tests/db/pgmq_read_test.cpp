// Tests of the PGMQ layer (sql/pgmq/V001__pgmq.sql, or the pgmq extension where
// it is installed) against PGMQ 1.5's documented behaviour, the scenarios of
// upstream's test/sql/base.sql and its isolation specs plus edge cases; this
// part: reading, polling, pop and set_vt. Every test uses its own queues
// (test::unique_name) and drops them at the end, so tests do not depend on each
// other or on the database's history. Only the scenarios that are about time
// wait, for 1-2 s at most. Shared fixtures: tests/db/pgmq_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/pgmq_support.hpp"

using namespace cmdbus;
using db::errc;
using namespace cmdbus::pgmq_test;

// -- reading ----------------------------------------------------------------------

// Upstream's base.sql: read with vt 0
TEST_F(PgmqRead, VtZeroAndConditional) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '{\"hello\": \"world\"}'::jsonb)", q), 1);
  EXPECT_EQ(read_ids(q, 0, 1), std::vector<int64_t>{1});
  auto m = conn.query("SELECT msg_id, read_ct FROM pgmq.read($1::text, 2, 1, '{\"hello\": \"world\"}'::jsonb)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.int64(0, 0), 1);
  EXPECT_EQ(m.int64(0, 1), 2);
}

TEST_F(PgmqRead, ConditionalFiltersByContainment) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['{\"k\": 1, \"x\": true}', '{\"k\": 2}', '{\"k\": 1}']::jsonb[])", q);
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, 0, 10, '{\"k\": 1}'::jsonb)", q)),
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, 0, 10, '{\"k\": 3}'::jsonb)", q)),
            std::vector<int64_t>{});
  // NULL and '{}' mean no filter.
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, 0, 10, NULL::jsonb)", q)),
            (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, 0, 10, '{}'::jsonb)", q)),
            (std::vector<int64_t>{1, 2, 3}));
}

// Upstream's base.sql: read and qty
TEST_F(PgmqRead, QtyAndInvisibility) {
  auto q = new_queue();
  EXPECT_EQ(send(q), 1);
  EXPECT_EQ(send(q), 2);
  EXPECT_EQ(send(q), 3);
  EXPECT_EQ(read_ids(q, 5, 1), std::vector<int64_t>{1});
  EXPECT_EQ(read_ids(q, 10, 5), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(read_ids(q, 10, 5).empty());
}

TEST_F(PgmqRead, ReturnsAllColumnsUpdatedAndAscending) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g)) FROM generate_series(1, 40) g))", q);
  // Shuffle the physical order: hide some, read others, make all visible.
  conn.query("SELECT * FROM pgmq.read($1::text, 0, 7)", q);
  for (int id : {3, 17, 29, 8, 40, 1})
    conn.query("SELECT * FROM pgmq.set_vt($1::text, $2::bigint, 0)", q, id);
  conn.query("SELECT * FROM pgmq.read($1::text, 0, 40, '{}'::jsonb)", q);
  auto r = conn.query("SELECT *, vt > clock_timestamp() + interval '25 s', vt < clock_timestamp() + interval '31 s' FROM pgmq.read($1::text, 30, 40)", q);
  ASSERT_EQ(r.columns(), 8);
  for (int c = 0; c < 6; ++c)
    EXPECT_EQ(r.column_name(c), (std::vector<std::string>{"msg_id", "read_ct", "enqueued_at", "vt", "message", "headers"})[c]);
  EXPECT_EQ(ints(r), range(1, 40));
  for (int i = 0; i < r.rows(); ++i) {
    auto id = r.int64(i, 0);
    EXPECT_EQ(r.int64(i, 1), id <= 7 ? 3 : 2) << id;
    EXPECT_EQ(r.text(i, 4), std::to_string(id));
    EXPECT_TRUE(r.is_null(i, 5));
    EXPECT_TRUE(r.boolean(i, 6));
    EXPECT_TRUE(r.boolean(i, 7));
  }
  // The table holds what read returned.
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE vt > now() + interval '20 s'"), 40);
}

TEST_F(PgmqRead, EmptyQueueReturnsNoRows) {
  auto q = new_queue();
  auto r = conn.query("SELECT * FROM pgmq.read($1::text, 10, 5)", q);
  EXPECT_EQ(r.rows(), 0);
  EXPECT_EQ(r.columns(), 6);
}

// Upstream's base.sql: set_vt and polling (shortened: 1 s instead of 5 s)
TEST_F(PgmqReadWithPoll, WaitsForSetVtToExpire) {
  auto q = new_queue();
  EXPECT_EQ(send(q, "{\"hello\": \"world\"}"), 1);
  auto sv = conn.query("SELECT msg_id, vt > clock_timestamp() + interval '0.5 s' FROM pgmq.set_vt($1::text, 1, 1)", q);
  ASSERT_EQ(sv.rows(), 1);
  EXPECT_TRUE(sv.boolean(0, 1));
  EXPECT_TRUE(read_ids(q, 2, 1).empty());
  auto start = clock_type::now();
  auto r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 1, 10)", q);
  auto waited = seconds_since(start);
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 5.0);
}

// Upstream's base.sql: polling with a conditional (shortened)
TEST_F(PgmqReadWithPoll, WithConditional) {
  auto q = new_queue();
  send(q, "{\"hello\": \"world\"}");
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 1, 1)", q);
  auto r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 1, 10, 100, '{\"hello\": \"world\"}'::jsonb)", q);
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  // A non-matching conditional times out.
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 1, 0)", q);
  auto start = clock_type::now();
  r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 1, 1, 50, '{\"hello\": \"mars\"}'::jsonb)", q);
  EXPECT_EQ(r.rows(), 0);
  EXPECT_GT(seconds_since(start), 0.8);
}

// Upstream's base.sql: send with a timestamptz delay (shortened)
TEST_F(PgmqReadWithPoll, WaitsForTimestampDelay) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '{\"hello\": \"world\"}'::jsonb, clock_timestamp() + interval '1 second')", q), 1);
  EXPECT_TRUE(read_ids(q, 2, 1).empty());
  auto start = clock_type::now();
  auto r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 1, 10)", q);
  auto waited = seconds_since(start);
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 5.0);
}

// Upstream's base.sql: read_with_poll timing (shortened)
TEST_F(PgmqReadWithPoll, ReturnsOnlyWhatBecameVisible) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '1'::jsonb, 1)", q), 1);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '2'::jsonb, 100)", q), 2);
  auto start = clock_type::now();
  auto r = conn.query("SELECT msg_id, read_ct FROM pgmq.read_with_poll($1::text, 10, 5, 6, 100)", q);
  auto waited = seconds_since(start);
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  EXPECT_EQ(r.int64(0, 1), 1);
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 5.0);
}

TEST_F(PgmqReadWithPoll, TimesOutEmptyAndZeroMaxNeverReads) {
  auto q = new_queue();
  auto start = clock_type::now();
  auto r = conn.query("SELECT * FROM pgmq.read_with_poll($1::text, 10, 5, 1, 100)", q);
  auto waited = seconds_since(start);
  EXPECT_EQ(r.rows(), 0);
  EXPECT_EQ(r.columns(), 6);
  EXPECT_GT(waited, 0.9);
  EXPECT_LT(waited, 4.0);
  // max_poll_seconds <= 0 returns nothing without reading (quirk).
  send(q);
  EXPECT_EQ(conn.query("SELECT * FROM pgmq.read_with_poll($1::text, 10, 5, 0, 100)", q).rows(), 0);
  EXPECT_EQ(scalar("SELECT read_ct FROM pgmq.q_" + q), 0);
  // Visible messages come back at once.
  start = clock_type::now();
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 5)", q)), std::vector<int64_t>{1});
  EXPECT_LT(seconds_since(start), 1.0);
}

TEST_F(PgmqReadWithPoll, SeesMessagesCommittedWhilePolling) {
  auto q = new_queue();
  std::thread sender([&] {
    auto other = test::connect();
    std::this_thread::sleep_for(std::chrono::milliseconds(300)); // the scenario is about time
    other.query("SELECT * FROM pgmq.send($1::text, '7'::jsonb)", q);
  });
  auto start = clock_type::now();
  auto r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 5, 5, 20)", q);
  sender.join();
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  EXPECT_LT(seconds_since(start), 4.0);
}

// Upstream's base.sql: pop
TEST_F(PgmqPop, DeletesAndReturnsTheOldestVisible) {
  auto q = new_queue();
  auto empty = conn.query("SELECT * FROM pgmq.pop($1::text)", q);
  EXPECT_EQ(empty.rows(), 0);
  ASSERT_EQ(empty.columns(), 6);
  for (int c = 0; c < 6; ++c)
    EXPECT_EQ(empty.column_name(c), (std::vector<std::string>{"msg_id", "read_ct", "enqueued_at", "vt", "message", "headers"})[c]);
  send(q, "1");
  send(q, "2");
  send(q, "3");
  auto vt1 = conn.query("SELECT vt::text FROM pgmq.q_" + q + " WHERE msg_id = 1").opt_text(0, 0).value();
  auto r = conn.query("SELECT msg_id, read_ct, vt::text, message::text FROM pgmq.pop($1::text)", q);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.int64(0, 0), 1);
  EXPECT_EQ(r.int64(0, 1), 0);  // not incremented
  EXPECT_EQ(r.text(0, 2), vt1); // old vt
  EXPECT_EQ(r.text(0, 3), "1");
  EXPECT_EQ(count_rows("q_" + q), 2);
  EXPECT_EQ(count_rows("a_" + q), 0); // not archived
  // Invisible messages are skipped.
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 2, 100)", q);
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.pop($1::text)", q)), std::vector<int64_t>{3});
  EXPECT_EQ(conn.query("SELECT * FROM pgmq.pop($1::text)", q).rows(), 0);
}

// Upstream's base.sql: set_vt on a missing id; set_vt hides and reveals;
// set_vt(…, 0)
TEST_F(PgmqSetVt, MissingIdGivesNoRows) {
  auto q = new_queue();
  auto r = conn.query("SELECT * FROM pgmq.set_vt($1::text, 9999, 0)", q);
  EXPECT_EQ(r.rows(), 0);
  EXPECT_EQ(r.columns(), 6);
}

TEST_F(PgmqSetVt, HidesAndReveals) {
  auto q = new_queue();
  auto id = send(q, "{\"a\": 1}");
  auto r = conn.query("SELECT msg_id, read_ct, message::text, vt > clock_timestamp() + interval '95 s' FROM pgmq.set_vt($1::text, $2::bigint, 100)", q, id);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.int64(0, 0), id);
  EXPECT_EQ(r.int64(0, 1), 0); // unchanged
  EXPECT_EQ(r.text(0, 2), "{\"a\": 1}");
  EXPECT_TRUE(r.boolean(0, 3)); // the updated row is returned
  EXPECT_TRUE(read_ids(q, 10, 1).empty());
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.set_vt($1::text, $2::bigint, 0)", q, id)), std::vector<int64_t>{id});
  auto m = conn.query("SELECT msg_id, read_ct FROM pgmq.read($1::text, 0, 1)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.int64(0, 0), id);
  EXPECT_EQ(m.int64(0, 1), 1);
  // Upstream's base.sql, set_vt(…, 0): with vt 0 after a read, the next read
  // gets it again.
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.set_vt($1::text, $2::bigint, 0)", q, id)), std::vector<int64_t>{id});
  EXPECT_EQ(read_ids(q, 0, 1), std::vector<int64_t>{id});
}
