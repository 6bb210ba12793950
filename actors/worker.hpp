#pragma once

// The Worker facade: runs the actor runtime for one or more domains. No CAF
// headers here; applications include this and handler_registry.hpp.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/actors/ops/health.hpp"
#include "cmdbus/actors/ops/metrics.hpp"
#include "cmdbus/actors/tick.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/jobs.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/process/registry.hpp"

namespace cmdbus {

/// The worker's counts: the sums of its domains' metrics
/// (actors/ops/metrics.hpp) at one moment.
struct worker_stats {
  int64_t in_flight = 0;
  int64_t received = 0;
  int64_t completed = 0;
  int64_t retried = 0;
  int64_t moved_to_tsq = 0;
  int64_t failed = 0;
  int64_t rejected = 0;
  int64_t handler_restarts = 0;
  int64_t db_errors = 0;
  int64_t stale = 0;
};

/// What a tick run with runners (worker::run_tick_runners) did.
struct tick_result {
  /// The worker's counters after the run.
  worker_stats stats;
  /// Each runner: items, steps, why it stopped.
  tick_report report;
};

/// Called when a batch becomes complete (COMPLETED or
/// COMPLETED_WITH_FAILURES) through a worker, after the commit: once, or
/// again only if the process died before recording the delivery.
using batch_callback
  = std::function<void(const std::string& domain, const uuid& batch_id)>;

/// Runs command processing for the domains of a configuration: per domain
/// a poller (LISTEN/NOTIFY + polling), a bounded supervisor of handler
/// actors, and the completion / retry-scheduling / batch-counter actors
/// that own the side effects (see docs/worker.md); and the process managers
/// of its process registry (see docs/processes.md).
class worker {
public:
  /// Prepares a worker; `cfg` must be valid (config::validate).
  worker(config::worker_config cfg, handler_registry registry);

  /// Prepares a worker that also drives the processes of `processes`: per
  /// domain with workflows a reply router on `{domain}__process_replies`
  /// and one on each reply queue of its own of a process type, each reading
  /// only the replies to processes of the types registered here
  /// (docs/processes.md). Their commands are handled like any other (by
  /// this worker's handlers when it serves the domain).
  worker(config::worker_config cfg, handler_registry registry,
         process_registry processes);
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;
  /// Stops at once if still running (like stop_now).
  ~worker();

  // Every member below may be called from any thread; stop(), stop_now()
  // and the destructor may race and be repeated: exactly one of them stops
  // the running actors, the others return.

  /// Starts processing in the background, and the HTTP endpoint when
  /// configured. Throws std::logic_error when already started, and
  /// std::runtime_error when the endpoint cannot listen (nothing started).
  void start();

  /// Stops intake, lets in-flight commands finish up to `timeout`, flushes
  /// the side-effect actors and closes connections. The future becomes
  /// ready when everything stopped, or at the timeout (at least a second
  /// after the drain): commands still running then are abandoned (their
  /// handlers finish in the background, their results are not written,
  /// their messages reappear after the visibility timeout). The future
  /// stays valid after the worker is destroyed.
  std::future<void> stop(std::chrono::milliseconds timeout);

  /// Stops immediately without waiting for running handlers (their
  /// commands reappear after the visibility timeout; nothing is lost).
  /// Returns within about a second; handlers still inside application code
  /// then end in the background.
  void stop_now();

  /// Returns whether the worker runs.
  bool is_running() const noexcept;

  /// Returns the number of commands read and not yet handled (in a
  /// handler or waiting for one).
  size_t in_flight_count() const noexcept;

  /// Returns the first configured domain.
  const std::string& domain() const noexcept;

  /// Returns the counters so far.
  worker_stats stats() const noexcept;

  /// Evaluates the health of every domain and of the worker (the worst of
  /// them) from counters the actors keep; cheap (no query). Logs each
  /// change of a domain's state it sees, once (docs/worker.md, "Health").
  worker_health health() const;

  /// Returns whether the worker takes work: started, every domain's poller
  /// has read, and no stop has begun (what GET /readyz answers).
  bool is_ready() const noexcept;

  /// The metrics of every domain (same order as the configured domains),
  /// kept across restarts of the worker.
  std::vector<std::shared_ptr<const domain_metrics>> metrics() const;

  /// The port of the HTTP endpoint ([worker] http), 0 while it is off or
  /// the worker is stopped.
  int http_port() const noexcept;

  /// Registers a batch-completion callback. With callbacks registered, the
  /// worker records each batch it completes in the same transaction as the
  /// transition and marks it delivered after the callbacks ran; a
  /// completion recorded but not delivered (the process died) is delivered
  /// by the next worker with callbacks for the domain, at its start or in
  /// its periodic sweep (docs/worker.md).
  void on_batch_complete(batch_callback cb);

  /// Registers a singleton job (db/jobs.hpp, docs/scheduling.md "Singleton
  /// jobs"): `fn` runs every `interval` (first at start()) inside a
  /// transaction holding the advisory lock of "cmdbus:job:" + `name`, on
  /// the worker's database ([worker] dsn); on every replica that registers
  /// the same name, at most one runs it at a time, the others skip that
  /// run. Runs, skips and failures are logged and counted
  /// (cmdbus_job_runs_total). Throws std::logic_error when the worker runs,
  /// std::invalid_argument for an empty or already registered name or an
  /// interval below 1 ms.
  void add_job(std::string name, std::chrono::milliseconds interval, job_fn fn);

  /// The counts of the registered jobs, in registration order.
  std::vector<std::shared_ptr<const job_metrics>> job_metrics_all() const;

  /// Registers a tick runner of the application (actors/tick.hpp): named
  /// in [tick] runners to take its place in the order, else run after the
  /// built-in ones. Throws std::logic_error when the worker runs,
  /// std::invalid_argument for an empty name, a name taken by another
  /// runner or a built-in one, or no step function.
  void add_tick_runner(tick_runner runner);

  /// Tick mode with runners (`cmdbus worker --tick`): runs the runners of
  /// [tick] runners in order (by default each served domain's commands,
  /// "commands:NAME", then the singleton jobs, "jobs", then the
  /// application's runners), under the budgets and shard of the
  /// configuration ([tick]; docs/scheduling.md "Tick runs and budgets").
  /// A commands step processes what is due in its domain (at most the
  /// items left, taking none after the deadline), waits for its side
  /// effects (up to `timeout`) and stops; a jobs step runs each job of the
  /// shard once under its lock. Throws std::invalid_argument for an unknown
  /// runner name; a step's failure (e.g. the database) propagates.
  tick_result run_tick_runners(std::chrono::milliseconds timeout);

  /// Tick mode: processes what is due now in every domain, waits for its
  /// side effects, then stops. Returns the counters of the run.
  worker_stats run_tick(std::chrono::milliseconds timeout);

private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

} // namespace cmdbus
