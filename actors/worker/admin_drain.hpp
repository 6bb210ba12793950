#pragma once

// The drain `cmdbus cluster drain` asks of a running worker: a request to
// the root (every domain stops its intake and finishes what it holds) whose
// answer tells the worker facade that it is idle ("drained"). The worker
// stays up until it is stopped; its stop drains again, with nothing left to
// wait for.

#include <chrono>
#include <functional>

#include "cmdbus/actors/interfaces.hpp"

namespace cmdbus::actors {

/// State of an admin drain.
struct admin_drain_state {
  /// The root it asked.
  root_actor root;
  /// Runs once the root answered.
  std::function<void()> on_idle;
  /// How long the drain may take before a warning.
  std::chrono::milliseconds bound{0};
  static inline const char* name = "admin-drain";
};

/// The admin drain's behaviour: asks `root` to drain (atom::drain) and runs
/// `on_idle` when it answers atom::done, then ends. Logs a warning when the
/// answer takes longer than `bound` (the worker's shutdown timeout; it
/// keeps waiting: the worker is not idle before its handlers return). Ends
/// without running `on_idle` when the root ends first (the worker stops).
/// @param self The admin drain.
/// @param root The worker's root.
/// @param bound When to warn that the drain takes long.
/// @param on_idle What tells the facade (runs on this actor's thread).
admin_drain_actor::behavior_type
admin_drain(admin_drain_actor::stateful_pointer<admin_drain_state> self,
            root_actor root, std::chrono::milliseconds bound,
            std::function<void()> on_idle);

} // namespace cmdbus::actors
