// The shared queue plumbing (db/queues.hpp): create_queue validates before
// any SQL and is idempotent, also under concurrent creators and inside a
// transaction; notify reaches a LISTENer on the reference's channel (also
// one written as the reference writes it, with the queue's own case), at
// commit; and every send path, in C++ and in SQL, notifies the channel that
// `notify_channel` names, also for a queue name with upper-case letters.

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/transaction.hpp"
#include "tests/db/worker_sql_support.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

// A unique name with upper-case letters (`Prefix_<random>_<n>`).
std::string mixed_case(const std::string& prefix) {
  auto name = test::unique_name(prefix);
  name[0] = static_cast<char>(
    std::toupper(static_cast<unsigned char>(name[0])));
  return name;
}

int64_t meta_rows(db::connection& conn, const std::string& queue) {
  return conn
    .query("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1", queue)
    .int64(0, 0);
}

bool table_exists(db::connection& conn, const std::string& table) {
  return !conn.query("SELECT to_regclass($1)", "pgmq." + table).is_null(0, 0);
}

// Waits for notifications until `want` channels were seen or 5 s passed;
// returns every channel received.
std::multiset<std::string> receive(db::connection& listener, size_t want) {
  std::multiset<std::string> got;
  auto until = std::chrono::steady_clock::now() + 5s;
  while (got.size() < want && std::chrono::steady_clock::now() < until)
    for (auto& c : listener.wait_for_notifications(200ms))
      got.insert(c);
  return got;
}

// A connection whose server process is gone: any SQL on it fails with
// errc::connection.
db::connection broken_connection() {
  auto conn = test::connect();
  auto admin = test::connect();
  admin.query("SELECT pg_terminate_backend($1)", conn.backend_pid());
  try {
    for (int i = 0; i < 100; ++i)
      conn.exec("SELECT 1");
  } catch (const db::error&) {
    // expected: the terminated backend closed the connection
  }
  return conn;
}

} // namespace

// -- create_queue -------------------------------------------------------------

TEST(DbQueues, CreateQueueRejectsInvalidNamesBeforeAnySql) {
  // On a broken connection, any SQL would fail with a connection error:
  // an invalid name is rejected before that.
  auto conn = broken_connection();
  ASSERT_FALSE(conn.is_open());
  for (const std::string& bad :
       {std::string{}, std::string{"a-b"}, std::string{"x; DROP TABLE y"},
        std::string(48, 'q'), std::string{"caf\xc3\xa9"}}) {
    EXPECT_THROW(db::create_queue(conn, bad), db::invalid_argument) << bad;
    EXPECT_THROW(db::queue_exists(conn, bad), db::invalid_argument) << bad;
    EXPECT_THROW(db::notify(conn, bad), db::invalid_argument) << bad;
  }
  // A valid name does reach the (broken) connection.
  try {
    db::create_queue(conn, "valid_name");
    FAIL() << "expected a connection error";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::connection);
  }
}

TEST(DbQueues, CreateQueueIsIdempotent) {
  auto conn = test::connect();
  auto q = mixed_case("cq");
  EXPECT_FALSE(db::queue_exists(conn, q));
  db::create_queue(conn, q);
  EXPECT_TRUE(db::queue_exists(conn, q));
  EXPECT_EQ(meta_rows(conn, q), 1);
  EXPECT_TRUE(table_exists(conn, db::queue_table(q)));
  db::create_queue(conn, q);
  db::create_queue(conn, q);
  EXPECT_EQ(meta_rows(conn, q), 1);
  // PGMQ's notices are not left on the connection.
  EXPECT_TRUE(conn.take_notices().empty());
  // The queue works.
  EXPECT_GT(conn.query("SELECT pgmq.send($1, '{}'::jsonb, 0)", q).int64(0, 0),
            0);
  conn.query("SELECT pgmq.drop_queue($1)", q);
}

TEST(DbQueues, CreateQueueInsideATransactionIsUndoneByItsRollback) {
  auto conn = test::connect();
  auto other = test::connect();
  auto q = test::unique_name("cqtx");
  {
    db::transaction tx{conn};
    db::create_queue(conn, q);
    EXPECT_TRUE(db::queue_exists(conn, q));
    EXPECT_FALSE(db::queue_exists(other, q));
  }
  EXPECT_FALSE(db::queue_exists(conn, q));
  EXPECT_FALSE(table_exists(conn, db::queue_table(q)));
}

TEST(DbQueues, ConcurrentCreatorsOfOneNewQueueAllSucceed) {
  auto q = test::unique_name("cqcc");
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < failures.size(); ++t)
    threads.emplace_back([&, t] {
      try {
        auto c = test::connect();
        db::create_queue(c, q);
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  for (auto& th : threads)
    th.join();
  for (auto& f : failures)
    EXPECT_EQ(f, "");
  auto conn = test::connect();
  EXPECT_EQ(meta_rows(conn, q), 1);
  conn.query("SELECT pgmq.drop_queue($1)", q);
}

// -- notify -------------------------------------------------------------------

TEST(DbNotify, ChannelIsTheReferencesInLowerCase) {
  EXPECT_EQ(db::notify_channel("payments__commands"),
            "pgmq_notify_payments__commands");
  EXPECT_EQ(db::notify_channel("Orders_1__Replies"),
            "pgmq_notify_orders_1__replies");
}

TEST(DbNotify, ReachesAListenerOnTheQueuesChannelAtCommit) {
  auto q = mixed_case("nq");
  auto ours = test::connect();
  ours.listen(db::notify_channel(q));
  // A listener as the reference subscribes: LISTEN with the queue name as
  // written, an unquoted identifier.
  auto reference = test::connect();
  reference.exec("LISTEN pgmq_notify_" + q);
  // Another queue's listener hears nothing.
  auto bystander = test::connect();
  bystander.listen(db::notify_channel(q + "_other"));
  auto sender = test::connect();
  {
    db::transaction tx{sender};
    db::notify(sender, q);
    EXPECT_TRUE(ours.wait_for_notifications(50ms).empty());
    tx.commit();
  }
  auto want = std::multiset<std::string>{db::notify_channel(q)};
  EXPECT_EQ(receive(ours, 1), want);
  EXPECT_EQ(receive(reference, 1), want);
  EXPECT_TRUE(bystander.wait_for_notifications(50ms).empty());
  // Outside a transaction it is delivered at once.
  db::notify(sender, q);
  EXPECT_EQ(receive(ours, 1), want);
}

// The send paths write the channel rule in C++ (the single send, the COPY
// path) and in SQL (cmdbus_send_command, cmdbus_send_commands for chunks
// under copy_threshold; the worker's replies below): all of them notify
// `notify_channel(queue)`, also for a queue name with upper-case letters.
TEST(DbNotify, EverySendPathNotifiesTheSameChannel) {
  auto domain = mixed_case("nd");
  auto queue = db::command_queue(domain);
  auto channel = db::notify_channel(queue);
  auto listener = test::connect();
  listener.listen(channel);
  auto one = std::multiset<std::string>{channel};

  test::bus_env env;
  env.bus.send(test::make_req(domain)); // the single send's statement
  EXPECT_EQ(receive(listener, 1), one) << "send";

  auto batch = [&](size_t copy_threshold) {
    command_bus_options opts;
    opts.copy_threshold = copy_threshold;
    command_bus bus{env.pool, opts};
    bus.send_batch({test::make_req(domain), test::make_req(domain)});
  };
  batch(1); // COPY
  EXPECT_EQ(receive(listener, 1), one) << "send_batch, COPY";
  batch(100); // cmdbus_send_commands
  EXPECT_EQ(receive(listener, 1), one) << "send_batch, cmdbus_send_commands";

  env.conn.query("SELECT commandbus.cmdbus_send_command($1, $2, $3::uuid, "
                 "'T', '{}'::jsonb, NULL, NULL, 3, NULL)",
                 domain, queue, test::new_uuid());
  EXPECT_EQ(receive(listener, 1), one) << "cmdbus_send_command";
}

TEST(DbNotify, TheWorkersRepliesNotifyTheSameChannel) {
  namespace ws = worker_sql_test;
  ws::env e;
  auto replies = mixed_case("nr");
  auto listener = test::connect();
  listener.listen(db::notify_channel(replies));
  auto [id, msg_id] = ws::send(e);
  ws::receive(e.conn, e.domain, e.queue);
  ws::complete(e.conn, e.domain, e.queue,
               {{msg_id, id, false, replies,
                 R"({"command_id":")" + id
                   + R"(","correlation_id":null,"outcome":"SUCCESS",)"
                     R"("result":null})"}});
  EXPECT_EQ(receive(listener, 1),
            std::multiset<std::string>{db::notify_channel(replies)});
}
