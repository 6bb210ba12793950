#pragma once

// Internal wiring of the worker's actors (CAF headers; included only by
// actors/*.cpp and the actor tests).
//
// Per domain, a supervisor owns:
//   poller          detached; reads {domain}__commands with credits, woken
//                   by LISTEN/NOTIFY (listener thread) or its poll timer
//   handlers (N)    monitored; run the application's handlers: detached
//                   for blocking handlers, scheduled for non-blocking ones
//                   (N of each mode the domain's handlers use)
//   completion      detached; success / TSQ / business-rule side effects
//   retry scheduler detached; transient failures (set_vt backoff), leases
// and a process-wide batch counter runs batch-completion callbacks.

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
  config::retry_config retry;
  bool tick = false;
  std::shared_ptr<worker_counters> counters;
  std::shared_ptr<const handler_registry> registry;
  std::shared_ptr<std::atomic<bool>> cancelled;
  /// Receives (atom::batches, domain, std::vector<uuid>); may be invalid.
  caf::actor batch_counter;
  /// The completion writer records the batches it completes for durable
  /// callback delivery (set when batch callbacks are registered).
  bool record_batches = false;
  /// This domain's share of counters->in_flight, so that the root can
  /// correct the total when the domain's supervisor dies.
  std::shared_ptr<std::atomic<int64_t>> domain_in_flight;
};

/// Returns `*conn`, (re)opening it first when it is missing or broken, with
/// the domain's statement timeout and `application_name`. Throws
/// db::error when the database cannot be reached.
db::connection& ensure_connection(std::unique_ptr<db::connection>& conn,
                                  const domain_settings& settings,
                                  const char* application_name);

/// The same for a DSN and statement timeout.
db::connection& ensure_connection(std::unique_ptr<db::connection>& conn,
                                  const std::string& dsn,
                                  std::chrono::milliseconds statement_timeout,
                                  const char* application_name);

/// Returns the backoff in seconds after failed attempt `attempt` under
/// `retry` (rcmd.md §1.6), with +/- `retry.jitter` applied using `rng`.
int backoff_seconds(const config::retry_config& retry, int attempt,
                    std::mt19937_64& rng);

/// Spawn functions of a supervisor's children; tests replace them with
/// scheduled fakes. Each gets the spawning supervisor.
struct spawners {
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&)>
    poller;
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&)>
    completion;
  /// Spawns a handler actor for handlers of the given mode.
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&,
                           caf::actor retry, handler_mode)>
      handler;
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&)>
    retry;
};

/// Returns the production spawners (detached actors on real connections).
spawners default_spawners();

// -- supervisor --------------------------------------------------------------

/// State of a domain supervisor.
struct supervisor_state {
  domain_settings settings;
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
    received_command rc;
    std::chrono::steady_clock::time_point read_at;
  };
  /// Commands waiting for an idle handler: prefetched ones, and any while a
  /// crashed handler is replaced.
  std::deque<waiting> backlog;
  /// Running commands by msg_id: handler and the time the command was read.
  std::map<int64_t, std::pair<caf::actor, std::chrono::steady_clock::time_point>>
    running;
  /// Messages read whose side effects are not committed yet (drain waits
  /// for 0).
  int64_t held = 0;
  /// Freed handler slots not yet returned to the poller as credits.
  int64_t pending_credit = 0;
  /// Incremented whenever pending credits go out; a (atom::credit_due,
  /// epoch) timer of an older epoch is stale.
  uint64_t credit_epoch = 0;
  bool draining = false;
  bool poller_idle = false;
  /// Credit messages sent to the poller (tick mode: see atom::idle).
  int64_t credits_sent = 0;
  std::vector<caf::response_promise> drain_waiters;
  std::mt19937_64 rng{std::random_device{}()};
  static inline const char* name = "domain-supervisor";
};

/// Supervises one domain. Handles (atom::run, std::vector<received_command>)
/// and (atom::finish, db::finished_command) from the poller,
/// (atom::done, int64_t) from the writers, (atom::idle, int64_t
/// credits_seen) from the poller,
/// (atom::drain) -> atom::done once intake stopped and nothing is held,
/// (atom::heartbeat) internally.
caf::behavior supervisor(caf::stateful_actor<supervisor_state>* self,
                         domain_settings settings, spawners spawn);

// -- root --------------------------------------------------------------------

/// Spawns one domain supervisor (monitored by the root).
using domain_spawner
  = std::function<caf::actor(caf::event_based_actor*, const domain_settings&)>;

/// State of the worker's root supervisor.
struct root_state {
  std::vector<domain_settings> domains;
  domain_spawner spawn;
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
/// down. Handles (atom::drain) -> atom::done once every domain drained.
caf::behavior root(caf::stateful_actor<root_state>* self,
                   std::vector<domain_settings> domains, domain_spawner spawn);

// -- poller ------------------------------------------------------------------

/// Spawns the production poller for `settings`, reporting to `parent`.
caf::actor spawn_poller(caf::event_based_actor* parent,
                        const domain_settings& settings);

// -- writers -----------------------------------------------------------------

/// How the completion writer writes one buffer: one transaction, throwing
/// on failure; returns the batches that became complete.
using finish_fn
  = std::function<std::vector<uuid>(const std::vector<db::finished_command>&)>;
/// How the retry scheduler writes one buffer (one transaction, throws).
using reschedule_fn
  = std::function<void(const std::vector<db::retry_command>&)>;
/// How the retry scheduler extends visibility timeouts (msg_ids, seconds,
/// keep_longer) -> messages that still exist; throws on failure.
using extend_fn
  = std::function<int(const std::vector<int64_t>&, int, bool)>;

/// Spawns a completion writer reporting (atom::done, n) to `parent` and
/// completed batches to settings.batch_counter. It buffers
/// (atom::finish, db::finished_command) and writes through `write` (the
/// database when empty) when its mailbox ran empty and the oldest item
/// waited flush_interval, when 512 are buffered, on (atom::flush), and on
/// exit; a failed write keeps the buffer and is retried after a backoff.
/// Detached in production; scheduled (`detached` false) in tests.
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

/// Spawns a production handler actor: detached (a thread of its own) for
/// blocking handlers, scheduled for non-blocking ones.
caf::actor spawn_handler(caf::event_based_actor* parent,
                         const domain_settings& settings, caf::actor retry,
                         handler_mode mode);

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
/// and nothing is delivered twice otherwise (DECISIONS.md D3).
struct batch_counter_state {
  std::vector<batch_callback> callbacks;
  batch_delivery_settings settings;
  std::unique_ptr<db::connection> conn;
  std::chrono::steady_clock::time_point next_sweep;
  std::shared_ptr<worker_counters> counters;
  static inline const char* name = "batch-counter";
};
caf::behavior batch_counter(caf::stateful_actor<batch_counter_state>* self,
                            std::vector<batch_callback> callbacks,
                            batch_delivery_settings settings,
                            std::shared_ptr<worker_counters> counters);

} // namespace cmdbus::actors
