#pragma once

// The process-wide batch counter: delivers batch-completion callbacks from
// the records the completion writers commit with each completed batch.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/ops/metrics.hpp"
#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::actors {

/// Where and how the batch counter delivers recorded batch completions
/// (claim with a lease, run the callbacks, mark delivered).
struct batch_delivery_settings {
  /// The worker's configuration (where, which domains, statement timeout).
  std::shared_ptr<const config::worker_config> cfg;
  /// How long a claimed delivery is reserved for this process; after a
  /// crash, the batch is delivered again once it expired.
  std::chrono::seconds lease{60};
  /// How often recorded, undelivered completions are looked for (also at
  /// start): those of a worker that died before delivering them.
  std::chrono::milliseconds sweep_interval{30000};
  /// By domain: its metrics, where the failed round trips of its
  /// deliveries are counted (other_db_errors). A domain without any is not
  /// counted.
  std::map<std::string, std::shared_ptr<domain_metrics>> metrics;
};

/// State of the batch counter.
struct batch_counter_state {
  std::vector<batch_callback> callbacks;
  batch_delivery_settings settings;
  /// One session per database (by DSN): domains on one database share
  /// it, and one database's outage leaves the others' deliveries alone.
  std::map<std::string, std::unique_ptr<db_session>> sessions;
  std::chrono::steady_clock::time_point next_sweep;
  /// The idle timeout of the current behavior (the time to the next sweep
  /// when it was set).
  std::chrono::milliseconds armed{0};
  /// By domain: batches whose callbacks ran but whose mark as delivered
  /// failed (the database went away in between). They are marked first on
  /// the next delivery or sweep of their domain, so that they are neither
  /// delivered again nor left waiting for their lease to expire.
  std::map<std::string, std::vector<uuid>> unmarked;
  /// This process's claimer token: a claim whose answer was lost (the
  /// connection dropped after it committed) is taken again on the retry
  /// instead of waiting for its lease to expire.
  uuid claimer = uuid::random();
  static inline const char* name = "batch-counter";
};
/// The batch counter's behaviour (detached: callbacks and the database may
/// block): runs the registered callbacks once per completed batch, claiming
/// each recorded completion first and marking it delivered after the
/// callbacks ran, so that a crash in between delivers it again later and
/// nothing is delivered twice otherwise. Answers (atom::drain) with
/// atom::done (everything reported before it was handled).
/// @param self The batch counter.
/// @param callbacks The application's callbacks.
/// @param settings Where and how it delivers.
batch_counter_actor::behavior_type
batch_counter(batch_counter_actor::stateful_pointer<batch_counter_state> self,
              std::vector<batch_callback> callbacks,
              batch_delivery_settings settings);

/// Spawns the production batch counter (detached), linked to `root`.
batch_counter_actor spawn_batch_counter(root_actor::pointer root,
                                        std::vector<batch_callback> callbacks,
                                        batch_delivery_settings settings);

} // namespace cmdbus::actors
