#pragma once

// Internal wiring of the worker's actors (CAF headers; included only by
// actors/*.cpp and the actor tests).
//
// Per domain, a supervisor owns:
//   poller          detached; reads {domain}__commands with credits, woken
//                   by LISTEN/NOTIFY (listener thread) or its poll timer
//   handlers (N)    detached, monitored; run the application's handlers
//   completion      detached; success / TSQ / business-rule side effects
//   retry scheduler detached; transient failures (set_vt backoff), leases
// and a process-wide batch counter runs batch-completion callbacks.

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
  std::function<caf::actor(caf::event_based_actor*, const domain_settings&,
                           caf::actor retry)>
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
  std::vector<caf::actor> handlers;
  std::deque<caf::actor> idle;
  /// Commands waiting for an idle handler (only after handler crashes).
  std::deque<received_command> backlog;
  /// Running commands by msg_id: handler and start time.
  std::map<int64_t, std::pair<caf::actor, std::chrono::steady_clock::time_point>>
    running;
  /// Messages read whose side effects are not committed yet (drain waits
  /// for 0).
  int64_t held = 0;
  /// Freed handler slots not yet returned to the poller as credits.
  int64_t pending_credit = 0;
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

/// Spawns the production completion actor.
caf::actor spawn_completion(caf::event_based_actor* parent,
                            const domain_settings& settings);

/// Spawns the production retry scheduler.
caf::actor spawn_retry(caf::event_based_actor* parent,
                       const domain_settings& settings);

/// Spawns a production handler actor.
caf::actor spawn_handler(caf::event_based_actor* parent,
                         const domain_settings& settings, caf::actor retry);

/// The process-wide batch counter: runs the registered callbacks once per
/// completed batch.
struct batch_counter_state {
  std::vector<batch_callback> callbacks;
  static inline const char* name = "batch-counter";
};
caf::behavior batch_counter(caf::stateful_actor<batch_counter_state>* self,
                            std::vector<batch_callback> callbacks);

} // namespace cmdbus::actors
