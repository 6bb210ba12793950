// Tick runs (actors/tick.hpp): the runners run in the given order, each
// until nothing is left or its budget (items, duration) is used up, and the
// overall budget stops the run; the report says which budget cut what. A
// fake clock moves only when a step says so, so durations are exact. Also
// the singleton jobs' lock keys and shard split (db/jobs.hpp): fixed
// values, stable across builds.

#include "cmdbus/actors/tick.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cmdbus/db/jobs.hpp"

namespace cmdbus {
namespace {

using namespace std::chrono_literals;
using time_point = std::chrono::steady_clock::time_point;

// A runner with `items` items of work, doing at most `per_step` per step
// (and at most what its limits allow); each item moves the clock by
// `item_cost`. Records its calls and limits.
struct fake_work {
  std::string name;
  int64_t items = 0;
  int64_t per_step = 1;
  std::chrono::milliseconds item_cost{0};
};

struct run_log {
  time_point now{};
  std::vector<std::string> calls;
  std::map<std::string, std::vector<tick_limits>> limits;
};

tick_runner runner_of(run_log& log, fake_work work) {
  auto left = std::make_shared<int64_t>(work.items);
  return {work.name,
          [&log, work, left](const tick_limits& lim) {
            log.calls.push_back(work.name);
            log.limits[work.name].push_back(lim);
            tick_step step;
            auto n = std::min(*left, work.per_step);
            if (lim.max_items)
              n = std::min(n, *lim.max_items);
            for (int64_t i = 0; i < n; ++i) {
              if (lim.deadline && log.now >= *lim.deadline)
                break;
              log.now += work.item_cost;
              ++step.items;
              --*left;
            }
            step.more = *left > 0;
            return step;
          },
          {}};
}

tick_report run(run_log& log, const std::vector<tick_runner>& runners,
                tick_budget per_runner = {},
                std::optional<std::chrono::milliseconds> overall = {}) {
  return run_tick_runners(runners, per_runner, overall,
                          [&log] { return log.now; });
}

TEST(TickRunners, RunInOrderEachUntilNothingIsLeft) {
  run_log log;
  auto report = run(log,
                    {runner_of(log, {"a", 3, 2}), runner_of(log, {"b", 1, 5}),
                     runner_of(log, {"c", 0, 5})});
  EXPECT_EQ(log.calls, (std::vector<std::string>{"a", "a", "b", "c"}));
  ASSERT_EQ(report.runners.size(), 3u);
  EXPECT_EQ(report.runners[0].name, "a");
  EXPECT_EQ(report.runners[0].items, 3);
  EXPECT_EQ(report.runners[0].steps, 2);
  EXPECT_EQ(report.runners[1].items, 1);
  EXPECT_EQ(report.runners[2].items, 0);
  for (auto& r : report.runners)
    EXPECT_EQ(r.stop, tick_stop::done) << r.name;
  EXPECT_FALSE(report.cut());
  EXPECT_EQ(report.items(), 4);
}

TEST(TickRunners, ItemBudgetStopsARunnerAndTheNextOneRuns) {
  run_log log;
  tick_budget per_runner;
  per_runner.max_items = 5;
  auto report = run(
    log, {runner_of(log, {"a", 100, 2}), runner_of(log, {"b", 3, 10})},
    per_runner);
  ASSERT_EQ(report.runners.size(), 2u);
  EXPECT_EQ(report.runners[0].items, 5);
  EXPECT_EQ(report.runners[0].stop, tick_stop::items);
  // Each step got what was left of the budget: 5, 3, 1.
  std::vector<int64_t> given;
  for (auto& l : log.limits["a"])
    given.push_back(l.max_items.value_or(-1));
  EXPECT_EQ(given, (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(report.runners[1].items, 3);
  EXPECT_EQ(report.runners[1].stop, tick_stop::done);
  EXPECT_TRUE(report.cut());
}

TEST(TickRunners, ARunnersOwnBudgetWinsOverThePerRunnerOne) {
  run_log log;
  tick_budget per_runner;
  per_runner.max_items = 5;
  auto a = runner_of(log, {"a", 100, 100});
  a.budget.max_items = 2;
  auto report = run(log, {a, runner_of(log, {"b", 100, 100})}, per_runner);
  EXPECT_EQ(report.runners[0].items, 2);
  EXPECT_EQ(report.runners[1].items, 5);
}

TEST(TickRunners, DurationBudgetStopsARunnerAndTheNextOneRuns) {
  run_log log;
  tick_budget per_runner;
  per_runner.max_duration = 100ms;
  auto report = run(log,
                    {runner_of(log, {"a", 1000, 1, 30ms}),
                     runner_of(log, {"b", 2, 1, 30ms})},
                    per_runner);
  // 30 ms per item: the 4th item starts at 90 ms, before the deadline; the
  // 5th would start at 120 ms.
  EXPECT_EQ(report.runners[0].items, 4);
  EXPECT_EQ(report.runners[0].stop, tick_stop::duration);
  EXPECT_EQ(report.runners[0].took, 120ms);
  EXPECT_EQ(report.runners[1].items, 2);
  EXPECT_EQ(report.runners[1].stop, tick_stop::done);
  // b's deadline is its own start + 100 ms.
  ASSERT_FALSE(log.limits["b"].empty());
  EXPECT_EQ(*log.limits["b"].front().deadline, time_point{} + 220ms);
  EXPECT_TRUE(report.cut());
}

TEST(TickRunners, OverallBudgetStopsTheRunAndSkipsTheRest) {
  run_log log;
  auto report = run(log,
                    {runner_of(log, {"a", 2, 1, 30ms}),
                     runner_of(log, {"b", 1000, 1, 30ms}),
                     runner_of(log, {"c", 5, 5})},
                    {}, 100ms);
  ASSERT_EQ(report.runners.size(), 3u);
  EXPECT_EQ(report.runners[0].items, 2);
  EXPECT_EQ(report.runners[0].stop, tick_stop::done);
  EXPECT_EQ(report.runners[1].stop, tick_stop::overall);
  EXPECT_EQ(report.runners[1].items, 2); // starts at 60, 90 ms
  EXPECT_EQ(report.runners[2].stop, tick_stop::not_run);
  EXPECT_EQ(report.runners[2].steps, 0);
  EXPECT_EQ(log.calls.back(), "b");
  EXPECT_TRUE(report.cut());
}

TEST(TickRunners, TheEarlierDeadlineBinds) {
  run_log log;
  tick_budget per_runner;
  per_runner.max_duration = 500ms;
  auto report = run(log, {runner_of(log, {"a", 1000, 1, 30ms})}, per_runner,
                    100ms);
  EXPECT_EQ(report.runners[0].stop, tick_stop::overall);
  EXPECT_EQ(*log.limits["a"].front().deadline, time_point{} + 100ms);
}

TEST(TickRunners, AStepThatDidNothingWithWorkLeftEndsItsRunner) {
  // E.g. commands held by another worker: no busy loop on them.
  run_log log;
  int calls = 0;
  tick_runner stuck{"stuck",
                    [&calls](const tick_limits&) {
                      ++calls;
                      return tick_step{0, true};
                    },
                    {}};
  auto report = run(log, {stuck});
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(report.runners[0].stop, tick_stop::done);
  EXPECT_FALSE(report.cut());
}

TEST(TickRunners, AFailingStepEndsTheRunWithItsFailure) {
  run_log log;
  tick_runner failing{"failing",
                      [](const tick_limits&) -> tick_step {
                        throw std::runtime_error("database gone");
                      },
                      {}};
  EXPECT_THROW(run(log, {failing, runner_of(log, {"b", 1, 1})}),
               std::runtime_error);
  EXPECT_TRUE(log.calls.empty());
}

TEST(JobKeys, AreTheFnv1aHashOfThePrefixedName) {
  // Fixed values: a change would let two releases run one job at once.
  // FNV-1a 64 of "cmdbus:job:nightly", computed independently (Python:
  // h = 0xcbf29ce484222325; for b in s: h = ((h ^ b) * 0x100000001b3) % 2**64).
  EXPECT_EQ(static_cast<uint64_t>(db::job_lock_key("nightly")),
            0x7d2ae1f0a78706f5ULL);
  EXPECT_NE(db::job_lock_key("a"), db::job_lock_key("b"));
}

TEST(JobShards, EveryJobIsInExactlyOneShard) {
  for (int count : {2, 3, 7}) {
    std::vector<int> per_shard(static_cast<size_t>(count), 0);
    for (int i = 0; i < 200; ++i) {
      auto name = "job-" + std::to_string(i);
      int in = 0;
      for (int index = 0; index < count; ++index)
        if (db::job_in_shard(name, index, count)) {
          ++in;
          ++per_shard[static_cast<size_t>(index)];
        }
      EXPECT_EQ(in, 1) << name << " of " << count;
    }
    for (auto n : per_shard)
      EXPECT_GT(n, 0) << "a shard of " << count << " got no job";
  }
  EXPECT_TRUE(db::job_in_shard("x", 0, 0));
  EXPECT_TRUE(db::job_in_shard("x", 0, 1));
}

} // namespace
} // namespace cmdbus
