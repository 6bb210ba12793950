#include "cmdbus/actors/tick.hpp"

#include <algorithm>

#include "cmdbus/model/log.hpp"

namespace cmdbus {

const char* to_string(tick_stop x) noexcept {
  switch (x) {
    case tick_stop::done: return "done";
    case tick_stop::items: return "items";
    case tick_stop::duration: return "duration";
    case tick_stop::overall: return "overall";
    case tick_stop::not_run: return "not_run";
  }
  return "not_run";
}

bool tick_report::cut() const noexcept {
  return std::any_of(runners.begin(), runners.end(),
                     [](const auto& r) { return r.stop != tick_stop::done; });
}

int64_t tick_report::items() const noexcept {
  int64_t n = 0;
  for (auto& r : runners)
    n += r.items;
  return n;
}

tick_report run_tick_runners(const std::vector<tick_runner>& runners,
                             const tick_budget& per_runner,
                             std::optional<std::chrono::milliseconds> overall,
                             tick_clock now) {
  using time_point = std::chrono::steady_clock::time_point;
  if (!now)
    now = [] { return std::chrono::steady_clock::now(); };
  auto ms = [](time_point a, time_point b) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(b - a);
  };
  tick_report report;
  auto start = now();
  std::optional<time_point> overall_deadline;
  if (overall)
    overall_deadline = start + *overall;
  for (const auto& runner : runners) {
    tick_runner_report r;
    r.name = runner.name;
    auto begun = now();
    if (overall_deadline && begun >= *overall_deadline) {
      r.stop = tick_stop::not_run;
      log::from("tick").info("tick: {} not run: the overall budget of {} ms "
                             "ran out",
                             runner.name, overall->count());
      report.runners.push_back(std::move(r));
      continue;
    }
    auto duration = runner.budget.max_duration ? runner.budget.max_duration
                                               : per_runner.max_duration;
    auto max_items = runner.budget.max_items ? runner.budget.max_items
                                             : per_runner.max_items;
    std::optional<time_point> own_deadline;
    if (duration)
      own_deadline = begun + *duration;
    // The earlier deadline binds; the overall one on a tie.
    std::optional<time_point> deadline = overall_deadline;
    bool own_binds = false;
    if (own_deadline && (!deadline || *own_deadline < *deadline)) {
      deadline = own_deadline;
      own_binds = true;
    }
    while (true) {
      tick_limits limits;
      if (max_items)
        limits.max_items = std::max<int64_t>(0, *max_items - r.items);
      limits.deadline = deadline;
      auto step = runner.step(limits);
      ++r.steps;
      r.items += step.items;
      if (!step.more) {
        r.stop = tick_stop::done;
        break;
      }
      if (max_items && r.items >= *max_items) {
        r.stop = tick_stop::items;
        break;
      }
      if (deadline && now() >= *deadline) {
        r.stop = own_binds ? tick_stop::duration : tick_stop::overall;
        break;
      }
      if (step.items == 0) {
        // Work is left that this runner cannot take now (e.g. held by
        // another worker): the next runner's turn.
        r.stop = tick_stop::done;
        break;
      }
    }
    r.took = ms(begun, now());
    log::from("tick").info("tick: {} did {} item(s) in {} step(s), {} ms: {}",
                           r.name, r.items, r.steps, r.took.count(),
                           to_string(r.stop));
    report.runners.push_back(std::move(r));
  }
  return report;
}

} // namespace cmdbus
