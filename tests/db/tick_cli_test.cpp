// `cmdbus worker --tick` with runners, budgets and shards (docs/scheduling.md
// "Tick runs and budgets") against the real database: the runners run in
// the configured order; two runs with --shard-index 0 and 1 of 2 take
// disjoint sets of commands that together are all of them; an item budget
// and the overall budget cut the run short with exit code 8, leaving the
// rest for the next run; the schedules runner fires due slots (in the run
// of shard 0 only); an unknown runner is a usage error.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/schedules.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

// A JSON text's field (a jsonb path such as {runners,0,name}) as text.
std::optional<std::string> jget(db::connection& c, const std::string& doc,
                                const std::string& path) {
  return c.query("SELECT $1::jsonb #>> $2::text[]", doc, path).opt_text(0, 0);
}

// Sends `n` demo commands that succeed to `domain`.
void send_demo(bus_env& env, const std::string& domain, int n) {
  std::vector<send_request> reqs;
  for (int i = 0; i < n; ++i)
    reqs.push_back(
      make_req(domain, "Test", R"({"behavior": {"outcome": "success"}})"));
  env.bus.send_batch(reqs);
}

process_result tick(const std::vector<std::string>& domains,
                    std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"worker", "--demo", "--tick", "--create",
                                "--json", "--dsn",  dsn()};
  for (auto& d : domains) {
    args.push_back("--domain");
    args.push_back(d);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cmdbus(args);
}

int64_t completed(db::connection& c, const std::string& domain,
                  const std::string& extra = "") {
  return c
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
           "status = 'COMPLETED'"
             + extra,
           domain)
    .int64(0, 0);
}

std::vector<std::string> runner_names(db::connection& c,
                                      const std::string& doc) {
  std::vector<std::string> out;
  auto r = c.query("SELECT x->>'name' FROM jsonb_array_elements($1::jsonb -> "
                   "'runners') AS x",
                   doc);
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.text(i, 0));
  return out;
}

TEST(TickCli, RunnersRunInTheConfiguredOrder) {
  bus_env env;
  auto a = unique_name("ticka");
  auto b = unique_name("tickb");
  send_demo(env, a, 2);
  send_demo(env, b, 2);
  auto r = tick({a, b});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(
    runner_names(env.conn, r.out),
    (std::vector<std::string>{"commands:" + a, "commands:" + b,
                              "schedules:" + a, "schedules:" + b, "jobs"}));
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,items}"), "2");
  EXPECT_EQ(jget(env.conn, r.out, "{cut}"), "false");
  send_demo(env, a, 1);
  r = tick({a, b}, {"--tick-runners", "jobs,commands"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(
    runner_names(env.conn, r.out),
    (std::vector<std::string>{"jobs", "commands:" + a, "commands:" + b}));
  EXPECT_EQ(completed(env.conn, a), 3);
  EXPECT_EQ(completed(env.conn, b), 2);
  r = tick({a}, {"--tick-runners", "commands,nosuch"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("nosuch"), std::string::npos) << r.out;
}

TEST(TickCli, ShardsTakeDisjointSetsThatTogetherAreAll) {
  bus_env env;
  auto d = unique_name("tickshard");
  send_demo(env, d, 40);
  auto r = tick({d}, {"--shard-index", "0", "--shard-count", "2"});
  // Nothing left in its shard: exit 0 although the other shard waits.
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto even = completed(env.conn, d);
  EXPECT_GT(even, 0);
  EXPECT_LT(even, 40);
  EXPECT_EQ(completed(env.conn, d, " AND msg_id % 2 = 1"), 0);
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,items}"), std::to_string(even));
  r = tick({d}, {"--shard-index", "1", "--shard-count", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,items}"),
            std::to_string(40 - even));
  EXPECT_EQ(completed(env.conn, d), 40);
  // Each command ran once.
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1 "
                     "AND event_type = 'RECEIVED'",
                     d)
              .int64(0, 0),
            40);
}

TEST(TickCli, AnItemBudgetCutsTheRunShortWithExitCode8) {
  bus_env env;
  auto d = unique_name("tickitems");
  send_demo(env, d, 10);
  auto r = tick({d}, {"--tick-runner-max-items", "4"});
  ASSERT_EQ(r.exit_code, 8) << r.out << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{cut}"), "true");
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,items}"), "4");
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,stop}"), "items");
  // The schedules and jobs runners (none due) still ran: a per-runner
  // budget stops its runner only.
  EXPECT_EQ(jget(env.conn, r.out, "{runners,1,stop}"), "done");
  EXPECT_EQ(jget(env.conn, r.out, "{runners,2,name}"), "jobs");
  EXPECT_EQ(jget(env.conn, r.out, "{runners,2,stop}"), "done");
  EXPECT_EQ(completed(env.conn, d), 4);
  r = tick({d});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(completed(env.conn, d), 10);
}

TEST(TickCli, TheOverallBudgetStopsTheRunWithExitCode8) {
  bus_env env;
  auto a = unique_name("tickall");
  auto b = unique_name("tickallb");
  send_demo(env, a, 3);
  send_demo(env, b, 3);
  // 1 ms is over before the first read (the step connects first).
  auto r = tick({a, b}, {"--tick-max-duration", "1ms"});
  ASSERT_EQ(r.exit_code, 8) << r.out << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,stop}"), "overall");
  EXPECT_EQ(jget(env.conn, r.out, "{runners,1,stop}"), "not_run");
  EXPECT_EQ(jget(env.conn, r.out, "{runners,2,stop}"), "not_run");
  EXPECT_EQ(completed(env.conn, a) + completed(env.conn, b), 0);
}

TEST(TickCli, TheSchedulesRunnerFiresTheDueSlotsOnShardZeroOnly) {
  using namespace std::chrono_literals;
  bus_env env;
  auto d = unique_name("ticksched");
  schedules::definition def;
  def.domain = d;
  def.name = "every-second";
  def.command_type = "Test";
  def.data = json::parse(R"({"behavior": {"outcome": "success"}})");
  def.every = std::chrono::milliseconds{1000};
  schedules::add(env.conn, def);
  ASSERT_TRUE(eventually(
    [&] {
      auto until = schedules::until_next_slot(env.conn, d);
      return until && until->count() <= 0;
    },
    10s));
  // Shard 1 of 2 leaves the schedules to shard 0.
  auto r = tick({d}, {"--tick-runners", "schedules", "--shard-index", "1",
                      "--shard-count", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,name}"), "schedules:" + d);
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,items}"), "0");
  EXPECT_EQ(schedules::get(env.conn, d, "every-second")->fired_count, 0);
  // Shard 0 fires the due slot(s): a command each.
  r = tick({d}, {"--tick-runners", "schedules", "--shard-index", "0",
                 "--shard-count", "2"});
  // No commands runner ran: the fired commands of this shard (even msg_id)
  // remain, which is exit code 5; none of them, exit code 0.
  auto remaining = jget(env.conn, r.out, "{remaining}");
  ASSERT_TRUE(remaining) << r.out << r.err;
  EXPECT_EQ(r.exit_code, *remaining == "0" ? 0 : 5) << r.out << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{cut}"), "false");
  auto fired = schedules::get(env.conn, d, "every-second")->fired_count;
  EXPECT_GE(fired, 1);
  EXPECT_EQ(jget(env.conn, r.out, "{runners,0,items}"), std::to_string(fired));
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM commandbus.command WHERE domain = "
                     "$1",
                     d)
              .int64(0, 0),
            fired);
}

TEST(TickCli, ShardAndBudgetSettingsAreChecked) {
  auto d = unique_name("tickbad");
  auto r = tick({d}, {"--shard-index", "2", "--shard-count", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  r = tick({d}, {"--shard-index", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  r = tick({d}, {"--tick-runner-max-items", "-1"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
}

} // namespace
