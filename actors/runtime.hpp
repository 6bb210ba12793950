#pragma once

// Internal wiring of the worker's actors (CAF headers; included only by
// actors/*.cpp and the actor tests).
//
// The root supervisor owns one supervisor per domain and the process-wide
// batch counter (batch-completion callbacks). Per domain, a supervisor owns:
//   poller          detached; reads {domain}__commands with credits, woken
//                   by LISTEN/NOTIFY (listener thread) or its poll timer
//   handlers (N)    run the application's handlers: detached for blocking
//                   handlers, scheduled for non-blocking ones (N of each
//                   mode the domain's handlers use)
//   completion      detached; success / TSQ / business-rule side effects
//   retry scheduler detached; transient failures (set_vt backoff), leases
// Every parent links its children: a parent that stops takes its children
// with it, and a child that dies is noticed by its parent (which replaces
// it, or restarts its domain). actors/shutdown.hpp describes the lifecycle.

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/db_session.hpp"
#include "actors/handler_registry.hpp"
#include "actors/messages.hpp"
#include "actors/worker.hpp"
#include "config/worker_config.hpp"
#include "db/connection.hpp"
#include "db/worker_store.hpp"

namespace cmdbus::actors {

/// Everything the actors of one domain need to know.
struct domain_settings {
  std::string dsn;
  std::string domain;
  int concurrency = 16;
  /// Messages read beyond the handler slots (worker_config::prefetch).
  int prefetch = 0;
  std::chrono::seconds visibility_timeout{30};
  std::chrono::milliseconds poll_interval{1000};
  bool use_notify = true;
  std::chrono::milliseconds statement_timeout{25000};
  std::chrono::milliseconds flush_interval{2};
  /// A writer that holds side effects and made no progress for this long,
  /// without reporting the database unavailable, is stuck: its domain is
  /// restarted.
  std::chrono::milliseconds stuck_after{75000};
  config::retry_config retry;
  bool tick = false;
  std::shared_ptr<worker_counters> counters;
  std::shared_ptr<const handler_registry> registry;
  std::shared_ptr<std::atomic<bool>> cancelled;
  /// The completion writer records the batches it completes for durable
  /// callback delivery (set when batch callbacks are registered).
  bool record_batches = false;
  /// This domain's share of counters->in_flight, so that the root can
  /// correct the total when the domain's supervisor dies.
  std::shared_ptr<std::atomic<int64_t>> domain_in_flight;
};

/// Returns the options of a database session of `settings`.
session_options session_for(const domain_settings& settings,
                            const char* application_name);

/// Returns the most messages a domain holds without committed side effects:
/// four times its slots (concurrency + prefetch), so that reads and commits
/// overlap under load (twice measured 20-50 % slower without a prefetch);
/// beyond it the poller gets no credits, so that an outage of the writers
/// cannot turn into messages read again and again.
int64_t hold_limit(const domain_settings& settings);

/// Returns the backoff in seconds after failed attempt `attempt` under
/// `retry` (its schedule, clamped to the last entry), with +/- `retry.jitter`
/// applied using `rng`.
int backoff_seconds(const config::retry_config& retry, int attempt,
                    std::mt19937_64& rng);

/// Spawn functions of a supervisor's children; tests replace them with
/// scheduled fakes. Each gets the spawning supervisor.
struct spawners {
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&)>
    poller;
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&)>
    completion;
  /// Spawns a handler actor for handlers of the given mode (it sends
  /// visibility extensions to the spawning supervisor).
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&,
                           handler_mode)>
    handler;
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&)>
    retry;
};

/// Returns the production spawners (detached actors on real connections,
/// each linked to the spawning supervisor).
spawners default_spawners();

// -- supervisor --------------------------------------------------------------

/// State of a domain supervisor.
struct supervisor_state {
  domain_settings settings;
  /// The root: takes the completed batches.
  caf::actor parent;
  caf::actor poller;
  caf::actor completion;
  caf::actor retry;
  spawners spawn;
  /// The handler actors of one handler_mode and the idle ones among them.
  struct pool {
    std::vector<caf::actor> all;
    std::deque<caf::actor> idle;
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
    caf::actor handler;
    command_ptr rc;
    std::chrono::steady_clock::time_point read_at;
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
  std::vector<caf::response_promise> drain_waiters;
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

/// Supervises one domain. Handles (atom::run, std::vector<received_command>),
/// (atom::finish, db::finished_command) and (atom::idle, int64_t
/// credits_seen) from the poller; (atom::done, int64_t),
/// (atom::unavailable) and (atom::batches, domain, ids) from the writers;
/// (atom::extend, msg_ids, seconds, keep_longer) -> int from handlers;
/// (atom::drain) -> atom::done once intake stopped and nothing is held;
/// (atom::heartbeat) and (atom::credit_due, epoch) internally. Reports
/// completed batches to `parent`.
caf::behavior supervisor(caf::stateful_actor<supervisor_state>* self,
                         domain_settings settings, spawners spawn,
                         caf::actor parent);

// -- root --------------------------------------------------------------------

/// Spawns one domain supervisor, linked to the root.
using domain_spawner
  = std::function<caf::actor(caf::event_based_actor*, const domain_settings&)>;

/// Spawns the batch counter, linked to the root.
using counter_spawner = std::function<caf::actor(caf::event_based_actor*)>;

/// State of the worker's root supervisor.
struct root_state {
  std::vector<domain_settings> domains;
  domain_spawner spawn;
  counter_spawner spawn_counter;
  /// The batch counter (replaced when it dies).
  caf::actor counter;
  /// The live supervisor of each domain (invalid while restarting).
  std::vector<caf::actor> supervisors;
  /// Consecutive restarts per domain (reset after a stable minute).
  std::vector<int> restarts;
  std::vector<std::chrono::steady_clock::time_point> started;
  bool stopping = false;
  static inline const char* name = "worker-root";
};

/// Returns the delay before restarting a domain after `restarts`
/// consecutive crashes: 1 s doubling up to 60 s.
std::chrono::milliseconds restart_delay(int restarts);

/// Runs one supervisor per domain and restarts a domain whose supervisor
/// died, with backoff, so one domain's crash loop never takes the others
/// down; runs the batch counter, replaced at once when it dies, and
/// forwards (atom::batches, domain, ids) to it. Handles (atom::drain) ->
/// atom::done once every domain drained and the batch counter ran the
/// callbacks of everything reported before.
caf::behavior root(caf::stateful_actor<root_state>* self,
                   std::vector<domain_settings> domains, domain_spawner spawn,
                   counter_spawner spawn_counter);

// -- poller ------------------------------------------------------------------

/// Spawns the production poller for `settings`, reporting to `parent`.
caf::actor spawn_poller(caf::event_based_actor* parent,
                        const domain_settings& settings);

// -- writers -----------------------------------------------------------------

/// How the completion writer writes one buffer: one transaction, throwing
/// on failure; returns the batches that became complete and the stale
/// deliveries.
using finish_fn = std::function<db::finish_result(
  const std::vector<db::finished_command>&)>;
/// How the retry scheduler writes one buffer (one transaction, throws);
/// returns the msg_ids of stale deliveries.
using reschedule_fn = std::function<std::vector<int64_t>(
  const std::vector<db::retry_command>&)>;
/// How the retry scheduler extends visibility timeouts (msg_ids, seconds,
/// keep_longer) -> messages that still exist; throws on failure.
using extend_fn
  = std::function<int(const std::vector<int64_t>&, int, bool)>;

/// Spawns a completion writer reporting (atom::batches, domain, ids) and
/// then (atom::done, n) to `parent` after each commit, and
/// (atom::unavailable) after a write failed for want of the database. It
/// buffers (atom::finish, db::finished_command) and writes through `write`
/// (the database when empty) when its mailbox ran empty and the oldest item
/// waited flush_interval, when 512 are buffered, on (atom::flush), and on
/// exit (unless the database is failing); a failed write keeps the buffer
/// and is retried after a backoff (up to 2 s), also while items keep
/// arriving. Detached in production; scheduled (`detached` false) in tests.
caf::actor spawn_completion_writer(caf::actor_system& sys,
                                   const domain_settings& settings,
                                   caf::actor parent, finish_fn write,
                                   bool detached);

/// The same for the retry scheduler, which buffers (atom::retry,
/// db::retry_command) and also answers (atom::extend, msg_ids, seconds,
/// keep_longer) -> int through `extend` (the database when empty).
caf::actor spawn_retry_writer(caf::actor_system& sys,
                              const domain_settings& settings,
                              caf::actor parent, reschedule_fn write,
                              extend_fn extend, bool detached);

/// Spawns the production completion actor, linked to `parent`.
caf::actor spawn_completion(caf::event_based_actor* parent,
                            const domain_settings& settings);

/// Spawns the production retry scheduler, linked to `parent`.
caf::actor spawn_retry(caf::event_based_actor* parent,
                       const domain_settings& settings);

/// Spawns a production handler actor linked to `parent` (its supervisor):
/// detached (a thread of its own) for blocking handlers, scheduled for
/// non-blocking ones.
caf::actor spawn_handler(caf::event_based_actor* parent,
                         const domain_settings& settings, handler_mode mode);

/// Where and how the batch counter delivers recorded batch completions
/// (V005: claim with a lease, run the callbacks, mark delivered).
struct batch_delivery_settings {
  std::string dsn;
  std::vector<std::string> domains;
  std::chrono::milliseconds statement_timeout{25000};
  /// How long a claimed delivery is reserved for this process; after a
  /// crash, the batch is delivered again once it expired.
  std::chrono::seconds lease{60};
  /// How often recorded, undelivered completions are looked for (also at
  /// start): those of a worker that died before delivering them.
  std::chrono::milliseconds sweep_interval{30000};
};

/// The process-wide batch counter (detached: callbacks and the database
/// may block): runs the registered callbacks once per completed batch,
/// claiming each recorded completion first and marking it delivered after
/// the callbacks ran, so that a crash in between delivers it again later
/// and nothing is delivered twice otherwise. Answers (atom::drain) ->
/// atom::done (everything reported before it was handled).
struct batch_counter_state {
  std::vector<batch_callback> callbacks;
  batch_delivery_settings settings;
  std::unique_ptr<db_session> session;
  std::chrono::steady_clock::time_point next_sweep;
  /// The idle timeout of the current behavior (the time to the next sweep
  /// when it was set).
  std::chrono::milliseconds armed{0};
  static inline const char* name = "batch-counter";
};
caf::behavior batch_counter(caf::stateful_actor<batch_counter_state>* self,
                            std::vector<batch_callback> callbacks,
                            batch_delivery_settings settings,
                            std::shared_ptr<worker_counters> counters);

} // namespace cmdbus::actors
