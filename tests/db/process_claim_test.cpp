// The read of a process reply queue by ownership
// (commandbus.cmdbus_claim_process_replies, sql/commandbus/V008) against a
// real PostgreSQL: it takes the replies to processes of the reader's domain
// and types and the messages no process manager can apply, in msg_id order
// and up to the quantity asked, and leaves every other message exactly as
// it was (read_ct, vt, not archived); a message another session holds
// locked is skipped without waiting; concurrent readers take each reply
// once. And the TSQ sweep limited to a worker's types.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/text_format.hpp"
#include "cmdbus/db/transaction.hpp"
#include "cmdbus/process/store.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"
#include "tests/unit/process_workflow_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

opt_str status_of_process(db::connection& c, const std::string& domain,
                          const uuid& id) {
  return scalar(c,
                "SELECT status FROM commandbus.process WHERE domain = $1 AND "
                "process_id = $2::uuid",
                domain, id.to_string());
}

// A domain with a reply queue and processes inserted directly.
struct claim_env {
  claim_env()
    : domain(unique_name("pcl")), other(unique_name("pco")),
      queue(domain + "__process_replies") {
    env.bus.ensure_queue(queue);
  }

  uuid process(const std::string& d, const std::string& type) {
    auto id = uuid::random();
    c().query("INSERT INTO commandbus.process (domain, process_id, "
              "process_type, status) VALUES ($1, $2::uuid, $3, 'WAITING')",
              d, id.to_string(), type);
    return id;
  }

  int64_t send(const std::string& body) {
    return c()
      .query("SELECT pgmq.send($1, $2::jsonb)", queue, body)
      .int64(0, 0);
  }

  // A reply whose correlation_id is the JSON value `correlation`.
  int64_t reply(const std::string& correlation) {
    return send(R"({"command_id":")" + uuid::random().to_string()
                + R"(","correlation_id":)" + correlation
                + R"(,"outcome":"SUCCESS","result":null})");
  }

  int64_t reply_to(const uuid& process) {
    return reply("\"" + process.to_string() + "\"");
  }

  std::vector<int64_t> claim(db::connection& conn,
                             const std::vector<std::string>& types, int qty,
                             int vt = 30) {
    auto r = conn.query(
      "SELECT msg_id, read_ct FROM commandbus.cmdbus_claim_process_replies("
      "$1, $2, $3::text[], $4, $5)",
      queue, domain, db::array_literal(types), vt, qty);
    std::vector<int64_t> out;
    for (int i = 0; i < r.rows(); ++i) {
      out.push_back(r.int64(i, 0));
      EXPECT_EQ(r.int64(i, 1), 1) << "msg_id " << out.back();
    }
    return out;
  }

  std::vector<int64_t> claim(const std::vector<std::string>& types, int qty) {
    return claim(c(), types, qty);
  }

  // msg_id -> "read_ct vt" of every message in the queue.
  std::map<int64_t, std::string> snapshot() {
    auto r = c().query("SELECT msg_id, read_ct || ' ' || vt::text FROM pgmq."
                       + db::queue_table(queue));
    std::map<int64_t, std::string> out;
    for (int i = 0; i < r.rows(); ++i)
      out[r.int64(i, 0)] = std::string{r.text(i, 1)};
    return out;
  }

  db::connection& c() {
    return env.conn;
  }

  bus_env env;
  std::string domain;
  std::string other;
  std::string queue;
};

} // namespace

TEST(ProcessReplyClaim, TakesItsTypesAndWhatNobodyCanApplyAndLeavesTheRest) {
  claim_env e;
  auto ours = e.process(e.domain, "Ours");
  auto theirs = e.process(e.domain, "Theirs");
  auto elsewhere = e.process(e.other, "Ours");
  auto upper = ours.to_string();
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);

  std::set<int64_t> left;
  std::vector<int64_t> taken;
  left.insert(e.reply_to(theirs));    // another type
  taken.push_back(e.reply_to(ours));  // ours
  left.insert(e.reply_to(elsewhere)); // another domain's process
  taken.push_back(e.send(R"({"outcome":"SUCCESS"})")); // no correlation_id
  taken.push_back(e.reply("null"));                    // null
  taken.push_back(e.reply("42"));                      // not a string
  taken.push_back(e.reply(R"("")"));                   // empty
  taken.push_back(e.reply_to(uuid::random())); // no such process anywhere
  left.insert(e.reply(R"("not-a-uuid")"));     // another library might
  left.insert(e.reply("\"{" + ours.to_string() + "}\"")); // not canonical
  taken.push_back(e.reply("\"" + upper + "\"")); // canonical, upper case
  taken.push_back(e.send("[1, 2]"));             // not an object
  auto before = e.snapshot();

  EXPECT_EQ(e.claim({"Ours"}, 100), taken);
  auto after = e.snapshot();
  ASSERT_EQ(after.size(), before.size()) << "a message was deleted";
  for (auto id : left)
    EXPECT_EQ(after[id], before[id]) << "msg_id " << id << " was touched";
  for (auto id : taken)
    EXPECT_TRUE(vt_beyond(e.c(), e.queue, id, "20 seconds")) << "msg_id " << id;
  EXPECT_EQ(archive_rows(e.c(), e.queue), 0);
  // Taken messages are invisible now; the others are still not ours.
  EXPECT_TRUE(e.claim({"Ours"}, 100).empty());
  // A reader of the other type takes its reply.
  EXPECT_EQ(e.claim({"Theirs", "Unknown"}, 100),
            std::vector<int64_t>{*left.begin()});
}

TEST(ProcessReplyClaim, TakesAtMostTheQuantityInMsgIdOrder) {
  claim_env e;
  auto ours = e.process(e.domain, "Ours");
  auto theirs = e.process(e.domain, "Theirs");
  std::vector<int64_t> mine;
  for (int i = 0; i < 5; ++i) {
    e.reply_to(theirs);
    mine.push_back(e.reply_to(ours));
  }
  EXPECT_EQ(e.claim({"Ours"}, 2), (std::vector<int64_t>{mine[0], mine[1]}));
  EXPECT_EQ(e.claim({"Ours"}, 2), (std::vector<int64_t>{mine[2], mine[3]}));
  EXPECT_EQ(e.claim({"Ours"}, 0), std::vector<int64_t>{});
  EXPECT_EQ(e.claim({}, 10), std::vector<int64_t>{});
  EXPECT_EQ(e.claim({"Ours"}, 10), std::vector<int64_t>{mine[4]});
}

TEST(ProcessReplyClaim, SkipsAMessageAnotherSessionHoldsWithoutWaiting) {
  claim_env e;
  auto ours = e.process(e.domain, "Ours");
  auto held = e.reply_to(ours);
  auto free = e.reply_to(ours);
  // Waiting for a lock would end in this statement timeout.
  e.c().exec("SET statement_timeout = '5s'");
  {
    // Another reader (any library) holds the first message's row.
    auto other = connect();
    db::transaction tx{other};
    other.query("SELECT msg_id FROM pgmq." + db::queue_table(e.queue)
                  + " WHERE msg_id = $1 FOR UPDATE",
                held);
    EXPECT_EQ(e.claim({"Ours"}, 10), std::vector<int64_t>{free});
  } // rolled back: the row is free again
  EXPECT_EQ(e.claim({"Ours"}, 10), std::vector<int64_t>{held});
  e.c().exec("SET statement_timeout = 0");
}

TEST(ProcessReplyClaim, ConcurrentReadersTakeEachReplyOnce) {
  claim_env e;
  std::vector<uuid> processes;
  for (int i = 0; i < 10; ++i)
    processes.push_back(e.process(e.domain, "Ours"));
  auto theirs = e.process(e.domain, "Theirs");
  std::set<int64_t> sent;
  for (int i = 0; i < 300; ++i) {
    sent.insert(e.reply_to(processes[i % processes.size()]));
    if (i % 5 == 0)
      e.reply_to(theirs);
  }
  auto before = e.snapshot();
  std::mutex mtx;
  std::vector<int64_t> got;
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r)
    readers.emplace_back([&] {
      auto conn = connect();
      for (;;) {
        auto batch = e.claim(conn, {"Ours"}, 7, 300);
        if (batch.empty())
          return;
        std::lock_guard<std::mutex> guard{mtx};
        got.insert(got.end(), batch.begin(), batch.end());
      }
    });
  for (auto& t : readers)
    t.join();
  EXPECT_EQ(got.size(), sent.size()) << "a reply was taken twice or missed";
  EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), sent);
  // The other type's replies were never touched.
  auto after = e.snapshot();
  for (auto& [id, state] : after) {
    if (sent.count(id) == 0) {
      EXPECT_EQ(state, before[id]) << "msg_id " << id;
    }
  }
}

TEST(ProcessReplyClaim, TheTsqSweepMovesOnlyTheTypesItIsGiven) {
  bus_env env;
  auto domain = unique_name("pcs");
  auto queue = domain + "__process_replies";
  env.bus.ensure_queue(db::command_queue(domain));
  env.bus.ensure_queue(queue);
  process_store store;
  auto id = store.start(env.conn, process_test::order_workflow(), domain,
                        process_test::order_input(), queue);
  env.conn.query("UPDATE commandbus.command SET status = "
                 "'IN_TROUBLESHOOTING_QUEUE' WHERE domain = $1",
                 domain);
  EXPECT_TRUE(
    store.mark_waiting_for_tsq(env.conn, domain, strings{"Other"}).empty());
  EXPECT_EQ(status_of_process(env.conn, domain, id), "WAITING");
  EXPECT_EQ(store.mark_waiting_for_tsq(env.conn, domain,
                                       strings{"Other", "OrderFulfilment"}),
            std::vector<uuid>{id});
  EXPECT_EQ(status_of_process(env.conn, domain, id), "WAITING_FOR_TSQ");
}
