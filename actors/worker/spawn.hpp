#pragma once

// Spawning and wiring the worker's actors: what the actors of one domain
// know (domain_settings), how a supervisor spawns its children (spawners;
// tests replace them with scheduled fakes), and the numbers derived from
// the settings that more than one actor uses.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/actors/ops/health.hpp"
#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/ops/metrics.hpp"
#include "cmdbus/actors/tick.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::actors {

/// Everything the actors of one domain need to know: the worker's
/// configuration (values; a new setting touches config/ and the actor that
/// uses it only) and the links of the running worker (wiring).
struct domain_settings {
  /// The domain these actors serve.
  std::string domain;
  /// The worker's configuration, shared by every domain (read-only).
  std::shared_ptr<const config::worker_config> cfg;
  /// Tick mode (worker::run_tick): process what is due now, then drain.
  bool tick = false;
  /// Tick mode: the step's limits (the poller reads no more than
  /// max_items messages and none after the deadline), the shard it reads
  /// (shard_count > 1: messages whose msg_id % shard_count ==
  /// shard_index), and where the poller marks that a limit stopped it.
  tick_limits tick_limit;
  int shard_index = 0;
  int shard_count = 0;
  std::shared_ptr<std::atomic<bool>> tick_cut;
  /// The completion writer records the batches it completes for durable
  /// callback delivery (set when batch callbacks are registered).
  bool record_batches = false;

  // -- links of the running worker -------------------------------------------

  std::shared_ptr<const handler_registry> registry;
  std::shared_ptr<std::atomic<bool>> cancelled;
  /// This domain's metrics (actors/ops/metrics.hpp): every count its actors
  /// keep (the worker's figures are their sums over the domains). Never
  /// null.
  std::shared_ptr<domain_metrics> metrics;
  /// This domain's health inputs (actors/ops/health.hpp): the facts health
  /// needs besides the counts (failures in a row, outages, stuck handlers).
  std::shared_ptr<domain_health_counters> health;
};

/// Returns the counter of `actor`'s failed round trips in the domain's
/// metrics, for its db_session.
std::shared_ptr<std::atomic<int64_t>>
db_error_counter(const domain_settings& settings, db_actor actor);

/// Returns how long a writer that holds side effects may make no progress,
/// without reporting the database unavailable, before it counts as stuck
/// and its domain is restarted: three statement timeouts.
std::chrono::milliseconds stuck_after(const domain_settings& settings);

/// Returns the options of a database session of `settings`.
session_options session_for(const domain_settings& settings,
                            const char* application_name);

/// Returns the most messages a domain holds without committed side effects:
/// four times its slots (`capacity`: local concurrency, connected remote
/// slots and prefetch), so that reads and commits overlap under load (twice
/// measured 20-50 % slower without a prefetch); beyond it the poller gets
/// no credits, so that an outage of the writers cannot turn into messages
/// read again and again.
int64_t hold_limit(int64_t capacity);

/// Returns the backoff in seconds after failed attempt `attempt` under
/// `retry` (its schedule, clamped to the last entry; 30 s when empty), with
/// +/- `retry.jitter` applied using `rng`.
int backoff_seconds(const config::retry_config& retry, int attempt,
                    std::mt19937_64& rng);

/// Spawn functions of a supervisor's children; tests replace them with
/// scheduled fakes. Each gets the spawning supervisor and links the child
/// to it.
struct spawners {
  std::function<poller_actor(supervisor_actor::pointer, const domain_settings&)>
    poller;
  std::function<completion_actor(supervisor_actor::pointer,
                                 const domain_settings&)>
    completion;
  /// Spawns a handler actor for handlers of the given mode (it sends
  /// visibility extensions to the spawning supervisor).
  std::function<handler_actor(supervisor_actor::pointer, const domain_settings&,
                              handler_mode)>
    handler;
  std::function<retry_scheduler_actor(supervisor_actor::pointer,
                                      const domain_settings&)>
    retry;
  /// Spawns the keeper of the connection to the remote pool at the given
  /// "HOST:PORT" (only called when remote pools are configured).
  std::function<remote_link_actor(supervisor_actor::pointer,
                                  const domain_settings&, const std::string&)>
    remote;
};

/// Returns the production spawners (detached actors on real connections,
/// each linked to the spawning supervisor).
spawners default_spawners();

/// Spawns the production supervisor of `settings`, linked to `root`.
supervisor_actor spawn_supervisor(root_actor::pointer root,
                                  const domain_settings& settings);

} // namespace cmdbus::actors
