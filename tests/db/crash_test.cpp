// Crash safety: the worker process is killed (SIGKILL, like kill -9) at
// each point between the side effects of a command (after the receive was
// committed, after the handler ran, after the side effects were committed);
// a fresh worker then brings every command to its correct final state with
// exactly one final transition, exact batch counters, and at most a
// duplicated handler run (never a lost completion, reply, retry or count).

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "db/command_bus.hpp"
#include "db/pool.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

test::process_result run_worker(const std::string& domain,
                                const std::string& fault) {
  std::vector<std::string> argv{CMDBUS_BINARY,        "worker",
                                "--tick",             "--domain",
                                domain,               "--dsn",
                                test::dsn(),          "--visibility-timeout",
                                "1",                  "--statement-timeout",
                                "500ms",              "--backoff",
                                "0",                  "--json"};
  std::vector<std::string> env{"CMDBUS_DSN=", "CMDBUS_CONFIG="};
  env.push_back(fault.empty() ? "CMDBUS_FAULT_INJECT="
                              : "CMDBUS_FAULT_INJECT=" + fault);
  return test::run_process(argv, env);
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
    status = std::string{
      conn.query("SELECT status FROM commandbus.command WHERE domain = $1",
                 domain)
        .text(0, 0)};
    if (status == sc.final_status
        && scalar(conn,
                  "SELECT count(*) FROM pgmq.q_" + domain + "__commands")
             == 0)
      break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
      << fault << "/" << sc.name << " stuck in " << status;
    auto r = run_worker(domain, "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
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
