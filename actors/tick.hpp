#pragma once

// Tick runs (`cmdbus worker --tick`, worker::run_tick_runners): a list of
// runners run one after the other, each in bounded steps, under budgets. A
// runner is a name and a function that does one bounded step of its work
// (at most the items and until the deadline it is given) and says how many
// items it did and whether anything is left. The run stops a runner at the
// first of: nothing left, its item budget, its duration budget; and stops
// the whole run at the overall duration budget (docs/scheduling.md, "Tick
// runs and budgets"). No CAF headers.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cmdbus {

/// What one step of a runner may do.
struct tick_limits {
  /// At most this many items (unset: no bound).
  std::optional<int64_t> max_items;
  /// Take no new item after this time (unset: no bound); an item taken
  /// before it is finished, so a step may end a little after it.
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

/// What one step did.
struct tick_step {
  /// Items done (commands handled, jobs attempted, ...).
  int64_t items = 0;
  /// Whether work is left that a further step could do now.
  bool more = false;
};

/// A budget: a duration and an item count, each optional.
struct tick_budget {
  std::optional<std::chrono::milliseconds> max_duration;
  std::optional<int64_t> max_items;
};

/// One runner of a tick run.
struct tick_runner {
  /// Its name in the run's order, log lines and report ("commands:D",
  /// "jobs", ...).
  std::string name;
  /// Does one bounded step within the limits it is given. Throwing ends the
  /// run with that failure.
  std::function<tick_step(const tick_limits&)> step;
  /// Its own budget (the run's per-runner budget unless set).
  tick_budget budget;
};

/// Why a runner stopped.
enum class tick_stop {
  /// Nothing left (its last step said so, or did nothing).
  done,
  /// Its item budget was used up with work left.
  items,
  /// Its duration budget ran out with work left.
  duration,
  /// The run's overall duration budget ran out with work left.
  overall,
  /// Not run: the overall budget ran out before its turn.
  not_run,
};

/// Returns "done", "items", "duration", "overall" or "not_run".
const char* to_string(tick_stop x) noexcept;

/// What became of one runner.
struct tick_runner_report {
  std::string name;
  int64_t items = 0;
  int steps = 0;
  tick_stop stop = tick_stop::not_run;
  std::chrono::milliseconds took{0};
};

/// What became of a tick run: its runners in the order they were run.
struct tick_report {
  std::vector<tick_runner_report> runners;

  /// Whether a budget cut the run short (a runner stopped with work left,
  /// or was not run).
  bool cut() const noexcept;

  /// The items of every runner.
  int64_t items() const noexcept;
};

/// The clock of a tick run (steady_clock's; tests move their own).
using tick_clock = std::function<std::chrono::steady_clock::time_point()>;

/// Runs `runners` in order: each runner's steps until a step says nothing
/// is left (or did nothing), its budget (the runner's own, else
/// `per_runner`) is used up, or `overall` (its duration) runs out, which
/// also skips the runners after it. Each step gets what is left of the
/// runner's item budget and the earlier of its two deadlines.
tick_report run_tick_runners(const std::vector<tick_runner>& runners,
                             const tick_budget& per_runner,
                             std::optional<std::chrono::milliseconds> overall,
                             tick_clock now = {});

} // namespace cmdbus
