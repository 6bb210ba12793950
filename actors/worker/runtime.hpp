#pragma once

// The lifecycle of the worker's actors, start to end, in one place.
//
// Start (runtime::start): a fresh actor system (actors/system_host.hpp: two
// scheduler threads, since the database work runs on detached actors; the
// network only with remote handler pools), then the root, which spawns the
// batch counter, one supervisor per domain and one process reply router per
// domain with process managers, each linked to it; each supervisor spawns
// its writers, handlers and poller, each router its process writers (and,
// as replies come, process actors), each linked to it. With singleton jobs
// (worker::add_job), the job runner (actors/worker/job_runner.hpp) beside
// the root, unlinked: it recovers from database failures itself and ends
// in step 2 below, after the run in progress.
//
// Links carry every ending down and every death up:
// - a parent that ends (for any reason, `kill` included) ends its children
//   with the same reason: the root's end ends every supervisor, a
//   supervisor's end ends its poller, handlers and writers;
// - a child that dies is noticed by its parent: a supervisor replaces a
//   dead handler or writer (what a dead writer held is lost and reappears
//   after the visibility timeout) and ends itself when its poller dies or a
//   writer is stuck (see supervisor_state::writer_log); the root restarts a
//   domain whose supervisor ended (1 s doubling up to 60 s) and replaces a
//   dead batch counter at once.
//
// Graceful stop (worker::stop, run_tick):
// 1. runtime::drain: the root asks every supervisor to drain: the poller is
//    stopped first (no new claims), the writers flush, and the supervisor
//    answers once nothing it read is held any more (every handler finished
//    and every side effect committed). Then the batch counter handles the
//    completions reported before. Bounded by the stop's timeout.
// 2. runtime::stop(user_shutdown): the root ends, the links end everything
//    below it; writers write what they still buffer on the way out (unless
//    the database is failing: the messages reappear after their visibility
//    timeout).
// 3. retire: the actor system is destroyed on a thread of its own, which
//    waits for every actor to end; the caller waits up to a grace period
//    (system_host, the same for the handler node and the admin port). A
//    handler stuck in application code (nothing can interrupt it) keeps
//    that thread waiting, never the caller.
//
// Drain without a stop (cmdbus cluster drain, runtime::drain_then): step 1
// only, answered through a response handler (actors/worker/admin_drain.hpp)
// while the worker stays up, taking no new work, until a stop, which drains
// again (nothing is held by then) and goes on with steps 2 and 3.
//
// Immediate stop (worker::stop_now, the destructor): steps 2 and 3 with a
// short grace, without the drain. Both stops may race from any threads; the
// facade hands the runtime to exactly one of them.
//
// Every application thread that touches the system drops its reference to
// CAF's logger when done (release_thread_logger, actors/system_host.hpp).

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include <caf/exit_reason.hpp>
#include <caf/fwd.hpp>

#include "cmdbus/actors/system_host.hpp"
#include "cmdbus/actors/worker.hpp"

namespace cmdbus::actors {

struct domain_settings;
struct batch_delivery_settings;
struct process_settings;
struct scheduler_settings;
class schedule_store;
struct job_runner_settings;

/// The running actors of a worker: its actor system and root. Thread-safe.
/// Destroying the last handle ends the root (if nobody stopped it) and hands
/// the system to a thread of its own for destruction (see retire).
class runtime {
public:
  /// Starts the actors of `domains`, the process reply routers of
  /// `processes` (see the top of this file) and, with `schedules` (its
  /// settings and database), the scheduler of recurring schedules, which
  /// ends with the root.
  static std::shared_ptr<runtime>
  start(std::vector<domain_settings> domains,
        std::vector<batch_callback> callbacks, batch_delivery_settings delivery,
        std::vector<process_settings> processes = {},
        std::shared_ptr<const scheduler_settings> schedules = nullptr,
        std::shared_ptr<schedule_store> schedule_db = nullptr);

  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;
  ~runtime();

  /// Starts the singleton job runner of `settings` (actors/worker/
  /// job_runner.hpp) beside the root; step 2 ends it too (after the run in
  /// progress, if any).
  void start_jobs(job_runner_settings settings);

  /// Asks every domain to drain (step 1); returns whether all confirmed
  /// within `timeout`.
  bool drain(std::chrono::milliseconds timeout);

  /// Asks every domain to drain (step 1) without waiting: `on_idle` runs
  /// (on a thread of the actor system) once the root answers, i.e. nothing
  /// is held any more; a warning is logged when that takes longer than
  /// `bound`. If the actors end first, `on_idle` never runs.
  void drain_then(std::chrono::milliseconds bound,
                  std::function<void()> on_idle);

  /// Ends the root with `reason` (step 2); later calls do nothing.
  void stop(caf::exit_reason reason);

  /// Returns a future that becomes ready once the actor system is gone.
  std::shared_future<void> gone() const;

  struct impl;

private:
  explicit runtime(std::unique_ptr<impl> ptr);
  std::unique_ptr<impl> impl_;
};

/// Drops `rt` and waits up to `grace` for its actor system to be gone
/// (step 3). Returns whether it is; otherwise it ends in the background.
bool retire(std::shared_ptr<runtime> rt, std::chrono::milliseconds grace);

} // namespace cmdbus::actors
