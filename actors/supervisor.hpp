#pragma once

// The supervisor of one domain: spawns and supervises its poller, handlers
// and writers, dispatches the commands the poller reads to idle handlers,
// hands their outcomes to the writers, returns credits to the poller as
// slots free up (bounded by the hold limit), extends the leases of what it
// holds, and drains on request.

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <caf/typed_response_promise.hpp>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/spawn.hpp"

namespace cmdbus::actors {

/// State of a domain supervisor.
struct supervisor_state {
  domain_settings settings;
  /// The root: takes the completed batches.
  batch_listener_actor parent;
  poller_actor poller;
  completion_actor completion;
  retry_scheduler_actor retry;
  spawners spawn;
  /// The handler actors of one handler_mode and the idle ones among them.
  struct pool {
    std::vector<handler_actor> all;
    std::deque<handler_actor> idle;
  };
  /// By handler_mode: each has `concurrency` actors when the domain has
  /// handlers of its mode, else none.
  std::array<pool, 2> pools;
  /// A command read and not started yet, and when it was read (its
  /// visibility timeout runs from then).
  struct waiting {
    command_ptr rc;
    std::chrono::steady_clock::time_point read_at;
  };
  /// Commands waiting for an idle handler: prefetched ones, and any while a
  /// crashed handler is replaced.
  std::deque<waiting> backlog;
  /// A command in a handler.
  struct running_command {
    handler_actor handler;
    command_ptr rc;
    std::chrono::steady_clock::time_point read_at;
    /// When the handler got it (the real clock: a handler's duration).
    std::chrono::steady_clock::time_point started_at;
  };
  /// Running commands by delivery number: a message read again while its
  /// first delivery still runs is a second entry.
  std::map<uint64_t, running_command> running;
  uint64_t next_delivery = 0;
  /// What one writer was handed and has not committed yet.
  struct writer_log {
    /// When each item was handed over, oldest first (writers commit in
    /// order).
    std::deque<std::chrono::steady_clock::time_point> pending;
    /// The last commit, or when `pending` stopped being empty.
    std::chrono::steady_clock::time_point last_progress;
    /// The last report that the database was unavailable.
    std::chrono::steady_clock::time_point last_unavailable;
  };
  writer_log completion_log;
  writer_log retry_log;
  /// Credits the poller holds (it reads at most that many messages).
  int64_t granted = 0;
  /// Freed handler slots not yet returned to the poller as credits.
  int64_t pending_credit = 0;
  /// Whether the hold limit keeps pending credits back (they go out as
  /// side effects commit).
  bool withheld = false;
  /// Incremented whenever pending credits go out; a (atom::credit_due,
  /// epoch) timer of an older epoch is stale.
  uint64_t credit_epoch = 0;
  bool draining = false;
  bool poller_idle = false;
  /// Credit messages sent to the poller (tick mode: see atom::idle).
  int64_t credits_sent = 0;
  std::vector<caf::typed_response_promise<atom::done>> drain_waiters;
  std::mt19937_64 rng{std::random_device{}()};
  /// "supervisor/<domain>".
  std::string name;

  /// Messages read whose side effects are not committed yet (a drain waits
  /// for 0): waiting, running, or handed to a writer.
  int64_t held() const noexcept {
    return static_cast<int64_t>(backlog.size() + running.size()
                                + completion_log.pending.size()
                                + retry_log.pending.size());
  }
};

/// The supervisor's behaviour (interfaces.hpp lists its messages). A dead
/// handler or writer is replaced; the poller's death, a stuck writer or an
/// exit from `parent` ends the domain (the links end its children).
/// @param self The supervisor.
/// @param settings Its domain's settings.
/// @param spawn How it spawns its children (fakes in tests).
/// @param parent The root: takes the completed batches.
supervisor_actor::behavior_type
supervisor(supervisor_actor::stateful_pointer<supervisor_state> self,
           domain_settings settings, spawners spawn,
           batch_listener_actor parent);

} // namespace cmdbus::actors
