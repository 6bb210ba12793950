#pragma once

// The supervisor of one domain: spawns and supervises its poller, handlers
// and writers, dispatches the commands the poller reads to idle handlers,
// hands their outcomes to the writers, returns credits to the poller as
// slots free up (bounded by the hold limit), extends the leases of what it
// holds, and drains on request. Remote handler pools (handler nodes) add
// their slots to the credits while connected; commands of the types only
// they serve run there, and a pool that vanishes gives its commands back to
// the queue at once.

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
#include "cmdbus/actors/worker/credit_ledger.hpp"
#include "cmdbus/actors/worker/prefetch_tuner.hpp"
#include "cmdbus/actors/worker/spawn.hpp"

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
  /// A connected remote handler pool (a handler node's session for this
  /// domain): its slots count towards the domain's credits, and commands
  /// of its types that no local handler serves run there.
  struct remote_pool {
    /// "HOST:PORT" as configured: the key of pool_up / pool_down.
    std::string address;
    remote::handler_pool_actor hdl;
    /// The command types it serves, sorted.
    std::vector<std::string> types;
    int64_t slots = 0;
    /// Commands it runs now; never above `slots`.
    int64_t busy = 0;
  };
  /// The connected remote pools, one per address at most.
  std::vector<remote_pool> remotes;
  /// One connection keeper per configured remote pool (actors/remote_link).
  std::vector<remote_link_actor> links;
  /// Local handler slots: `concurrency`, or 0 when the domain has no local
  /// handler and relies on remote pools.
  int64_t local_slots = 0;
  /// Messages read ahead of free slots now: the configured prefetch, or
  /// the one `tuner` chose (`prefetch = auto`, outside tick mode, with
  /// local slots, without priorities).
  int64_t prefetch = 0;
  bool auto_prefetch = false;
  prefetch_tuner tuner{0};
  /// A command in a handler (local or remote).
  struct running_command {
    /// The local handler; null when it runs in a remote pool.
    handler_actor handler;
    command_ptr rc;
    std::chrono::steady_clock::time_point read_at;
    /// When the handler got it (the actor clock: the steady clock, or the
    /// test coordinator's).
    std::chrono::steady_clock::time_point started_at;
    /// The address of the remote pool that runs it; "" when local.
    std::string remote;
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
  /// A capped command type ([domains.NAME.types.TYPE] concurrency): how
  /// many of its commands run now and how many are held (waiting or
  /// running). The poller claims no more than the cap (per-type credits),
  /// and dispatch starts none beyond it.
  struct type_cap {
    int64_t limit = 0;
    int64_t running = 0;
    int64_t held = 0;
  };
  /// By command type; only the capped types.
  std::map<std::string, type_cap> caps;
  /// The poller's credits, the freed slots not yet returned and the debt
  /// of vanished remote pools (actors/worker/credit_ledger.hpp).
  credit_ledger credits;
  bool draining = false;
  bool poller_idle = false;
  /// Credit messages sent to the poller (tick mode: see atom::idle).
  int64_t credits_sent = 0;
  std::vector<caf::typed_response_promise<atom::done>> drain_waiters;
  std::mt19937_64 rng{std::random_device{}()};
  /// "supervisor/<domain>".
  std::string name;

  /// The slots the credits stand for: local plus connected remote ones,
  /// plus the prefetch now.
  int64_t capacity() const noexcept {
    int64_t n = local_slots + prefetch;
    for (auto& r : remotes)
      n += r.slots;
    return n;
  }

  /// The credit invariant (credit_ledger) for what waits or runs here
  /// (outside a drain, which retires credits).
  bool credits_balanced() const noexcept {
    return credits.balanced(
      static_cast<int64_t>(backlog.size() + running.size()), capacity());
  }

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
