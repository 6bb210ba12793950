// The connection's pipeline mode and LISTEN/NOTIFY against the real
// database: one round trip, the first error, no deadlock on large results,
// notifications only at commit, and a lost connection reported instead of a
// hang. A call that could hang runs on a thread of its own with a deadline
// (`returns_within`).

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;
TEST(DbPipeline, RunsStatementsInOneRoundTrip) {
  auto conn = test::connect();
  auto results = conn.pipeline({{"SELECT $1::int + 1", {db::to_param(1)}},
                                {"SELECT $1::text", {db::to_param("x")}},
                                {"SELECT generate_series(1, 3)", {}}});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].int64(0, 0), 2);
  EXPECT_EQ(results[1].text(0, 0), "x");
  EXPECT_EQ(results[2].rows(), 3);
  // The connection is back in normal mode.
  EXPECT_EQ(conn.exec("SELECT 7").int64(0, 0), 7);
}

TEST(DbPipeline, FirstErrorIsThrownAndTransactionRollsBack) {
  auto conn = test::connect();
  conn.exec("CREATE TEMP TABLE t (id int PRIMARY KEY)");
  try {
    conn.pipeline({{"BEGIN", {}},
                   {"INSERT INTO t VALUES ($1)", {db::to_param(1)}},
                   {"INSERT INTO t VALUES ($1)", {db::to_param(1)}},
                   {"INSERT INTO t VALUES ($1)", {db::to_param(2)}},
                   {"COMMIT", {}}});
    FAIL() << "expected a unique violation";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::unique_violation);
  }
  if (conn.in_transaction())
    conn.exec("ROLLBACK");
  EXPECT_EQ(conn.exec("SELECT count(*) FROM t").int64(0, 0), 0);
  EXPECT_EQ(conn.exec("SELECT 1").int64(0, 0), 1);
}

TEST(DbPipeline, LargePipelineDoesNotDeadlock) {
  auto conn = test::connect();
  std::vector<db::connection::statement> sts;
  // Each result is ~8 KB, far more than socket buffers hold in total.
  for (int i = 0; i < 2000; ++i)
    sts.push_back({"SELECT repeat('x', 8000), $1::int", {db::to_param(i)}});
  auto results = conn.pipeline(sts);
  ASSERT_EQ(results.size(), 2000u);
  EXPECT_EQ(results[1999].int64(0, 1), 1999);
}

// A pipeline on a connection whose server process is gone (a restart, a
// cut connection) reports a connection error instead of waiting for results
// that never come. Run on a thread of its own, so that a hang fails the test
// at the deadline instead of blocking the suite.
TEST(DbPipeline, LostConnectionIsReportedNotHung) {
  auto conn = std::make_shared<db::connection>(test::connect());
  auto admin = test::connect();
  admin.query("SELECT pg_terminate_backend($1)", conn->backend_pid());
  auto outcome = std::make_shared<std::string>();
  ASSERT_TRUE(test::returns_within([conn, outcome] {
    try {
      conn->pipeline({{"BEGIN", {}},
                      {"SELECT $1::int", {db::to_param(1)}},
                      {"COMMIT", {}}});
      *outcome = "no error";
    } catch (const db::error& e) {
      *outcome = e.code() == db::errc::connection ? "connection" : e.what();
    }
  })) << "pipeline on a lost connection did not return";
  EXPECT_EQ(*outcome, "connection");
  EXPECT_FALSE(conn->is_open());
}

TEST(DbListen, WaitReturnsNotificationsAndTimesOut) {
  auto listener = test::connect();
  auto channel = test::unique_name("pgmq_notify_t");
  listener.listen(channel);
  EXPECT_TRUE(listener.wait_for_notifications(10ms).empty());
  auto sender = test::connect();
  sender.exec("NOTIFY " + channel);
  sender.exec("NOTIFY " + channel);
  auto got = listener.wait_for_notifications(5000ms);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front(), channel);
}

TEST(DbListen, NotificationIsDeliveredOnlyAtCommit) {
  auto listener = test::connect();
  auto channel = test::unique_name("pgmq_notify_c");
  listener.listen(channel);
  auto sender = test::connect();
  db::transaction tx{sender};
  sender.exec("NOTIFY " + channel);
  EXPECT_TRUE(listener.wait_for_notifications(50ms).empty());
  tx.commit();
  EXPECT_FALSE(listener.wait_for_notifications(5000ms).empty());
}

TEST(DbListen, RejectsInvalidChannelNames) {
  auto conn = test::connect();
  EXPECT_THROW(conn.listen("x; DROP TABLE y"), db::invalid_argument);
  EXPECT_THROW(conn.listen(""), db::invalid_argument);
  EXPECT_THROW(conn.listen(std::string(64, 'a')), db::invalid_argument);
}

TEST(DbListen, TheChannelOfTheLongestQueueNameIsListenedTo) {
  // A queue name may have 47 characters; its channel pgmq_notify_{queue}
  // then has 59 (a reply queue of a long domain, e.g. a process reply
  // queue), and must still be listened to.
  auto queue = test::unique_name("q");
  queue += std::string(db::max_queue_name_length - queue.size(), 'x');
  db::validate_queue_name(queue);
  auto channel = db::notify_channel(queue);
  ASSERT_GT(channel.size(), db::max_queue_name_length);
  auto listener = test::connect();
  listener.listen(channel);
  auto sender = test::connect();
  sender.query("SELECT pg_notify($1, '')", channel);
  auto got = listener.wait_for_notifications(5000ms);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front(), channel);
}

TEST(DbListen, BrokenConnectionIsReportedNotHung) {
  auto listener = test::connect();
  listener.listen(test::unique_name("pgmq_notify_b"));
  auto admin = test::connect();
  admin.query("SELECT pg_terminate_backend($1)", listener.backend_pid());
  try {
    // The terminated backend closes the socket: the wait returns at once.
    for (int i = 0; i < 100; ++i)
      listener.wait_for_notifications(5000ms);
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection);
  }
}
