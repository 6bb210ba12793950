// Crash safety of process managers through the binary: demo processes
// (DemoOrder, apps/demo_workflows.hpp) are driven by `cmdbus worker`
// processes that kill themselves (SIGKILL, like kill -9) at their first
// process transition, once before its commit and once after it, and then by
// a worker that runs normally. Every process must reach its terminal state
// having run each step exactly once, in order, with one reply per command.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/process/registry.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

struct expected_path {
  const char* charge;
  const char* status;
  /// The steps in the order they were sent, and each reply's outcome.
  strings steps;
  strings outcomes;
};

const expected_path ok_path{"ok",
                            "COMPLETED",
                            {"Reserve", "Charge", "Ship"},
                            {"SUCCESS", "SUCCESS", "SUCCESS"}};
const expected_path declined_path{"declined",
                                  "CANCELED",
                                  {"Reserve", "Charge", "Release"},
                                  {"SUCCESS", "FAILED", "SUCCESS"}};

std::vector<std::string> worker_args(const std::string& domain) {
  return {"worker",
          "--demo",
          "--domain",
          domain,
          "--dsn",
          test::dsn(),
          "--visibility-timeout",
          "1",
          "--statement-timeout",
          "500ms",
          "--backoff",
          "0",
          "--poll-interval",
          "100ms",
          "--quiet"};
}

std::string start_process(const std::string& domain, const std::string& order,
                          const std::string& charge) {
  auto r = run_cmdbus(
    {"process", "start", domain, "DemoOrder", "--data",
     R"({"order_id": ")" + order + R"(", "charge": ")" + charge + R"("})",
     "--json"},
    {"CMDBUS_DSN=" + test::dsn()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto conn = connect();
  return jget(conn, r.out, "{process_id}").value_or("");
}

strings column_of(db::connection& c, const std::string& sql,
                  const std::string& domain, const std::string& id) {
  auto r = c.query(sql, domain, id);
  strings out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(r.is_null(i, 0) ? "" : std::string{r.text(i, 0)});
  return out;
}

} // namespace

TEST(process_crash, killed_before_and_after_a_commit_every_process_finishes) {
  auto domain = unique_name("pcr");
  bus_env env;
  env.bus.ensure_queue(db::command_queue(domain));
  struct started {
    std::string id;
    const expected_path* path;
  };
  std::vector<started> processes;
  for (int i = 0; i < 6; ++i) {
    auto& path = i % 2 == 0 ? ok_path : declined_path;
    processes.push_back(
      {start_process(domain, "o-" + std::to_string(i), path.charge), &path});
    ASSERT_FALSE(processes.back().id.empty());
  }

  // 1. and 2. Each worker dies at its first transition: the first before
  //    the commit (nothing of it stays), the second after it (the router
  //    was not told). Their replies come back after the visibility timeout.
  for (auto fault : {"before-process-commit", "after-process-commit"}) {
    background_cmdbus w{worker_args(domain),
                        {"CMDBUS_FAULT_INJECT=" + std::string{fault}}};
    auto r = w.wait(60s);
    ASSERT_TRUE(r) << fault << ": the worker never reached a transition";
    EXPECT_EQ(r->exit_code, 128 + 9) << fault << ": " << r->err;
    auto answered = std::stoi(
      scalar(env.conn,
             "SELECT count(*) FROM commandbus.process_audit WHERE domain = $1"
             " AND received_at IS NOT NULL",
             domain)
        .value_or("0"));
    // Before the commit nothing of the transition stays; after it, it does.
    if (std::string{fault} == "before-process-commit")
      EXPECT_EQ(answered, 0);
    else
      EXPECT_GE(answered, 1);
  }

  // 3. A worker that runs normally brings every process to its end.
  {
    background_cmdbus w{worker_args(domain)};
    auto terminal = [&] {
      return scalar(env.conn,
                    "SELECT count(*) FROM commandbus.process WHERE domain = $1"
                    " AND status IN ('COMPLETED', 'CANCELED')",
                    domain)
             == std::to_string(processes.size());
    };
    EXPECT_TRUE(eventually(terminal, 60s))
      << "still running: "
      << scalar(env.conn,
                "SELECT string_agg(status || ' at ' || current_step, ', ')"
                " FROM commandbus.process WHERE domain = $1"
                " AND status NOT IN ('COMPLETED', 'CANCELED')",
                domain)
           .value_or("");
    auto r = w.stop();
    ASSERT_TRUE(r) << "the worker did not stop on SIGTERM";
    EXPECT_EQ(r->exit_code, 0) << r->err;
  }

  for (auto& p : processes) {
    SCOPED_TRACE(std::string{p.path->charge} + " " + p.id);
    EXPECT_EQ(scalar(env.conn,
                     "SELECT status FROM commandbus.process WHERE domain = $1"
                     " AND process_id = $2::uuid",
                     domain, p.id),
              p.path->status);
    // No step skipped or repeated: one audit row per step, in order.
    EXPECT_EQ(column_of(env.conn,
                        "SELECT step_name FROM commandbus.process_audit"
                        " WHERE domain = $1 AND process_id = $2::uuid"
                        " ORDER BY sent_at, id",
                        domain, p.id),
              p.path->steps);
    EXPECT_EQ(column_of(env.conn,
                        "SELECT reply_outcome FROM commandbus.process_audit"
                        " WHERE domain = $1 AND process_id = $2::uuid"
                        " ORDER BY sent_at, id",
                        domain, p.id),
              p.path->outcomes);
    // Each step's command ran to its one final outcome and was answered
    // once: one command per audit row, one final audit event per command.
    EXPECT_EQ(column_of(env.conn,
                        "SELECT c.status || ' ' || ("
                        "  SELECT count(*) FROM commandbus.audit e"
                        "  WHERE e.domain = c.domain AND e.command_id = "
                        "    c.command_id AND e.event_type IN ('COMPLETED',"
                        "    'BUSINESS_RULE_FAILED', 'FAILED', 'MOVED_TO_TSQ'))"
                        " FROM commandbus.process_audit a"
                        " JOIN commandbus.command c ON c.domain = a.domain"
                        "  AND c.command_id = a.command_id"
                        " WHERE a.domain = $1 AND a.process_id = $2::uuid"
                        " ORDER BY a.sent_at, a.id",
                        domain, p.id),
              (p.path == &ok_path
                 ? strings{"COMPLETED 1", "COMPLETED 1", "COMPLETED 1"}
                 : strings{"COMPLETED 1", "FAILED 1", "COMPLETED 1"}));
  }
  // Every command of the domain belongs to a step (none sent twice).
  EXPECT_EQ(command_rows(env.conn, domain), 18);
  EXPECT_EQ(scalar(env.conn,
                   "SELECT count(DISTINCT command_id) FROM "
                   "commandbus.process_audit WHERE domain = $1",
                   domain),
            "18");
  // Every reply was consumed.
  EXPECT_EQ(queue_rows(env.conn, process_reply_queue(domain)), 0);
}
