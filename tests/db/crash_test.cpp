// Crash safety: the worker process is killed (SIGKILL, like kill -9) at
// each point between the side effects of a command (after the receive was
// committed, after the handler ran, after the side effects were committed);
// a fresh worker then brings every command to its correct final state with
// exactly one final transition, exact batch counters, and at most a
// duplicated handler run (never a lost completion, reply, retry or count).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

test::process_result run_worker(const std::string& domain,
                                const std::string& fault) {
  std::vector<std::string> env;
  if (!fault.empty())
    env.push_back("CMDBUS_FAULT_INJECT=" + fault);
  return test::run_cmdbus({"worker", "--demo", "--tick", "--domain", domain,
                           "--dsn", test::dsn(), "--visibility-timeout", "1",
                           "--statement-timeout", "500ms", "--backoff", "0",
                           "--json"},
                          env);
}

int64_t scalar(db::connection& c, const std::string& sql) {
  return c.exec(sql).int64(0, 0);
}

int64_t scalar(db::connection& c, const std::string& sql,
               const std::string& arg) {
  return c.query(sql, arg).int64(0, 0);
}

struct scenario {
  const char* name;
  const char* behavior;
  int max_attempts;
  const char* final_status;
  const char* final_event;
  /// Replies expected in the end (SUCCESS or FAILED).
  int replies;
};

const scenario scenarios[] = {
  {"success", R"({"result": {"ok": true}})", 3, "COMPLETED", "COMPLETED", 1},
  {"business_rule", R"({"fail_business_rule_pct": 100})", 3, "FAILED",
   "BUSINESS_RULE_FAILED", 1},
  {"permanent", R"({"fail_permanent_pct": 100})", 3,
   "IN_TROUBLESHOOTING_QUEUE", "MOVED_TO_TSQ", 0},
  {"transient_exhausted", R"({"fail_transient_pct": 100})", 2,
   "IN_TROUBLESHOOTING_QUEUE", "MOVED_TO_TSQ", 0},
};

class CrashBetweenSideEffects
  : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

} // namespace

TEST_P(CrashBetweenSideEffects, NothingIsLost) {
  auto [fault, index] = GetParam();
  const auto& sc = scenarios[index];
  auto domain = test::unique_name("cr");
  auto replies = domain + "__replies";
  db::pool_options popts;
  popts.dsn = test::dsn();
  db::pool pool{popts};
  command_bus bus{pool};
  batch_command cmd;
  cmd.command_type = "Test";
  cmd.command_id = uuid::random();
  cmd.data = json::parse(std::string{R"({"behavior": )"} + sc.behavior + "}");
  cmd.reply_to = replies;
  cmd.max_attempts = sc.max_attempts;
  auto batch = bus.create_batch(domain, {cmd});
  auto id = cmd.command_id.to_string();
  auto conn = test::connect();

  // 1. The worker dies at the fault point.
  auto first = run_worker(domain, fault);
  ASSERT_EQ(first.exit_code, 128 + 9) << fault << ": " << first.err;

  // 2. Fresh workers (tick mode) run until the command is final; its
  //    message becomes visible again after the 1 s visibility timeout.
  auto deadline = std::chrono::steady_clock::now() + 30s;
  std::string status;
  for (;;) {
    status =
      conn.query("SELECT status FROM commandbus.command WHERE domain = $1",
                 domain)
        .opt_text(0, 0)
        .value();
    if (status == sc.final_status
        && scalar(conn,
                  "SELECT count(*) FROM pgmq.q_" + domain + "__commands")
             == 0)
      break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
      << fault << "/" << sc.name << " stuck in " << status;
    // Exit 5 while the message is invisible or once it went to the TSQ.
    auto r = run_worker(domain, "");
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 5) << r.err;
  }

  // 3. Exactly one final transition, exact batch counters, replies.
  EXPECT_EQ(conn
              .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1 "
                     "AND command_id = $2::uuid AND event_type = $3",
                     domain, id, std::string{sc.final_event})
              .int64(0, 0),
            1)
    << fault << "/" << sc.name;
  auto b = conn.query(
    "SELECT status, completed_count, failed_count, in_troubleshooting_count "
    "FROM commandbus.batch WHERE domain = $1 AND batch_id = $2::uuid",
    domain, batch.batch_id.to_string());
  std::string final_status = sc.final_status;
  EXPECT_EQ(b.int64(0, 1), final_status == "COMPLETED" ? 1 : 0);
  EXPECT_EQ(b.int64(0, 2), final_status == "FAILED" ? 1 : 0);
  EXPECT_EQ(b.int64(0, 3),
            final_status == "IN_TROUBLESHOOTING_QUEUE" ? 1 : 0);
  EXPECT_EQ(b.text(0, 0), final_status == "COMPLETED"  ? "COMPLETED"
                          : final_status == "FAILED"   ? "COMPLETED_WITH_FAILURES"
                                                       : "IN_PROGRESS");
  EXPECT_LE(scalar(conn,
                   "SELECT count(*) FROM commandbus.audit WHERE domain = $1 "
                   "AND event_type = 'BATCH_COMPLETED'",
                   domain),
            1);
  // Replies are never lost; they are sent with the final transition, which
  // happened once.
  auto sent = scalar(conn, "SELECT count(*) FROM pgmq.q_" + replies);
  EXPECT_EQ(sent, sc.replies) << fault << "/" << sc.name;
  // The message is gone (deleted or archived) and nothing else is pending.
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*) FROM commandbus.command WHERE domain = $1 "
                   "AND status IN ('PENDING', 'IN_PROGRESS')",
                   domain),
            0);
}

INSTANTIATE_TEST_SUITE_P(
  AllPointsAllOutcomes, CrashBetweenSideEffects,
  ::testing::Combine(::testing::Values("after-receive", "after-handler",
                                       "after-commit"),
                     ::testing::Values(0, 1, 2, 3)),
  [](const auto& info) {
    std::string point = std::get<0>(info.param);
    for (auto& c : point)
      if (c == '-')
        c = '_';
    return point + "_" + scenarios[std::get<1>(info.param)].name;
  });

// -- batch callbacks (delivered again after a crash unless recorded) ----------

namespace {

/// Batch ids a worker's callback saw, in order.
class callback_log {
public:
  void add(const uuid& id) {
    std::lock_guard<std::mutex> guard{mtx_};
    ids_.push_back(id);
  }
  int64_t count(const uuid& id) const {
    std::lock_guard<std::mutex> guard{mtx_};
    return std::count(ids_.begin(), ids_.end(), id);
  }

private:
  mutable std::mutex mtx_;
  std::vector<uuid> ids_;
};

/// Runs an in-process worker with a batch callback on `domain` until the
/// callback saw `marker` (a batch completed by this worker: the sweep of
/// recorded completions at start ran before, as it is the first message
/// the batch counter handles). Returns what the callback saw.
std::shared_ptr<callback_log> run_until_delivered(const std::string& domain,
                                                  const uuid& marker) {
  config::worker_config cfg;
  cfg.dsn = test::dsn();
  cfg.domains = {domain};
  cfg.concurrency = 2;
  cfg.poll_interval = 100ms;
  cfg.statement_timeout = 2s;
  handler_registry reg;
  reg.add(domain, "Test",
          [](const command&, handler_context&) { return json::null(); });
  worker w{cfg, std::move(reg)};
  auto log = std::make_shared<callback_log>();
  w.on_batch_complete(
    [log](const std::string&, const uuid& id) { log->add(id); });
  w.start();
  test::eventually([&] { return log->count(marker) != 0; }, 20s);
  w.stop(10s).get();
  return log;
}

} // namespace

TEST(CrashBatchCallback, DeliveredAgainOnlyIfNotRecordedAsDelivered) {
  auto domain = test::unique_name("cb");
  db::pool_options popts;
  popts.dsn = test::dsn();
  db::pool pool{popts};
  command_bus bus{pool};
  auto one = [] {
    batch_command c;
    c.command_type = "Test";
    c.command_id = uuid::random();
    return c;
  };
  auto conn = test::connect();
  auto delivery = [&](const uuid& batch) {
    return conn
      .query("SELECT coalesce(delivered_at IS NOT NULL, false)::text || '/' "
             "|| attempts FROM commandbus.cmdbus_batch_delivery WHERE domain "
             "= $1 AND batch_id = $2::uuid",
             domain, batch.to_string())
      .opt_text(0, 0)
      .value();
  };

  // 1. The worker dies right after committing the batch's completion: the
  //    completion is recorded, its callback never ran.
  auto crashed = bus.create_batch(domain, {one()});
  auto first = run_worker(domain, "after-commit");
  ASSERT_EQ(first.exit_code, 128 + 9) << first.err;
  ASSERT_EQ(conn
              .query("SELECT status FROM commandbus.batch WHERE domain = $1 "
                     "AND batch_id = $2::uuid",
                     domain, crashed.batch_id.to_string())
              .opt_text(0, 0),
            "COMPLETED");
  EXPECT_EQ(delivery(crashed.batch_id), std::string_view{"false/0"});

  // 2. The next worker with a callback delivers it, once, and records that.
  auto second = bus.create_batch(domain, {one()});
  auto log = run_until_delivered(domain, second.batch_id);
  EXPECT_EQ(log->count(second.batch_id), 1);
  EXPECT_EQ(log->count(crashed.batch_id), 1);
  EXPECT_EQ(delivery(crashed.batch_id), std::string_view{"true/1"});
  EXPECT_EQ(delivery(second.batch_id), std::string_view{"true/1"});

  // 3. A later worker delivers neither again.
  auto third = bus.create_batch(domain, {one()});
  auto log3 = run_until_delivered(domain, third.batch_id);
  EXPECT_EQ(log3->count(third.batch_id), 1);
  EXPECT_EQ(log3->count(crashed.batch_id), 0);
  EXPECT_EQ(log3->count(second.batch_id), 0);
}

TEST(CrashBatchCallback, ExpiredClaimOfADeadDelivererIsDeliveredAgain) {
  // A deliverer that died after claiming (callbacks may have run) leaves
  // its lease; once it expired, the next worker delivers again
  // (at-least-once); a live lease of another process is left alone.
  auto domain = test::unique_name("cb");
  db::pool_options popts;
  popts.dsn = test::dsn();
  db::pool pool{popts};
  command_bus bus{pool};
  auto conn = test::connect();
  auto expired = uuid::random(), live = uuid::random();
  conn.query("INSERT INTO commandbus.cmdbus_batch_delivery (domain, batch_id, "
             "claimed_until, attempts) VALUES ($1, $2::uuid, "
             "clock_timestamp() - interval '1 second', 1), ($1, $3::uuid, "
             "clock_timestamp() + interval '1 hour', 1)",
             domain, expired.to_string(), live.to_string());
  batch_command c;
  c.command_type = "Test";
  c.command_id = uuid::random();
  auto marker = bus.create_batch(domain, {c});
  auto log = run_until_delivered(domain, marker.batch_id);
  EXPECT_EQ(log->count(expired), 1);
  EXPECT_EQ(log->count(live), 0);
  EXPECT_EQ(conn
              .query("SELECT attempts FROM commandbus.cmdbus_batch_delivery "
                     "WHERE domain = $1 AND batch_id = $2::uuid AND "
                     "delivered_at IS NOT NULL",
                     domain, expired.to_string())
              .int64(0, 0),
            2);
}
