#pragma once

// The worker's scheduler: fires the due slots of the recurring schedules of
// the worker's domains (docs/scheduling.md, "Recurring schedules"). Every
// worker of a domain runs one; the database makes each slot fire once
// (db/schedules.hpp, fire_due).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/ops/metrics.hpp"
#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/schedules.hpp"

namespace cmdbus::actors {

/// What the scheduler does with the database (the production one below; a
/// fake in the actor tests). Every call may throw; the scheduler then
/// reports the failure and retries after the delay it returns.
class schedule_store {
public:
  virtual ~schedule_store() = default;

  /// Fires the due slots of `domain`, at most `limit` schedules, in one
  /// transaction (schedules::fire_due).
  virtual schedules::fire_result fire(const std::string& domain, int limit) = 0;

  /// Returns how long until `domain`'s earliest next slot by the server's
  /// clock (schedules::until_next_slot).
  virtual std::optional<std::chrono::microseconds>
  until_next(const std::string& domain) = 0;

  /// Records a failed call for `domain`; returns the delay before the next
  /// attempt.
  virtual std::chrono::milliseconds
  failed(const std::string& domain, const std::exception& e)
    = 0;

  /// Records a successful round for `domain`.
  virtual void succeeded(const std::string& domain) = 0;
};

/// The database behind the production scheduler: one db_session per
/// database (domains on one database share it), opened on demand, with the
/// worker's statement timeout, so that a lost connection, a restarted
/// server or a stalled statement ends in a retry with backoff.
std::shared_ptr<schedule_store>
make_schedule_store(std::shared_ptr<const config::worker_config> cfg);

/// How the scheduler runs.
struct scheduler_settings {
  /// The domains whose schedules it fires.
  std::vector<std::string> domains;
  /// By domain: where fired slots and database errors are counted (may be
  /// missing).
  std::map<std::string, std::shared_ptr<domain_metrics>> metrics;
  /// Schedules claimed per transaction; a full batch is followed by
  /// another at once.
  int batch = 100;
  /// The longest sleep: schedules added (or resumed) meanwhile are found
  /// within it.
  std::chrono::milliseconds max_sleep{1000};
  /// The sleep when a schedule is due but was not claimed (another worker
  /// holds it while firing it).
  std::chrono::milliseconds busy_sleep{50};
};

/// State of the scheduler.
struct scheduler_state {
  scheduler_settings settings;
  std::shared_ptr<schedule_store> store;
  /// The current timer; wakeups of older ones are ignored.
  uint64_t timer = 0;
  /// The sleep armed last (for tests and logs).
  std::chrono::milliseconds armed{0};
  /// By domain: no attempt before this time (a failure's backoff).
  std::map<std::string, caf::actor_clock::time_point> retry_at;
  /// Rounds run so far.
  int64_t rounds = 0;
  static inline const char* name = "scheduler";
};

/// The scheduler's behaviour (detached in production: the database
/// blocks). At start and at every wakeup it fires what is due in each
/// domain, then sleeps until the earliest next slot of its domains (by the
/// server's clock), at most `max_sleep`; a domain whose database failed is
/// retried after its backoff, the others go on.
/// @param self The scheduler.
/// @param settings Its domains and timings.
/// @param store Its database.
/// @param watched An actor whose end ends the scheduler (the worker's
/// root), or none.
scheduler_actor::behavior_type
scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
          scheduler_settings settings, std::shared_ptr<schedule_store> store,
          caf::actor_addr watched = {});

/// Spawns the production scheduler (detached); it ends when `root` ends.
scheduler_actor spawn_scheduler(caf::actor_system& sys, root_actor root,
                                scheduler_settings settings,
                                std::shared_ptr<schedule_store> store);

} // namespace cmdbus::actors
