#pragma once

// The singleton job runner of a worker: runs every job registered with
// worker::add_job at its interval, each run a transaction that first takes
// the job's advisory lock (db/jobs.hpp); the replicas that do not get it
// skip that run. One detached actor per worker with its own database
// session, which reconnects with backoff after a lost connection or a
// restarted server; a stalled statement ends at the statement timeout and
// counts as a failed run.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/ops/metrics.hpp"
#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/db/jobs.hpp"

namespace cmdbus::actors {

/// One attempt of a job: returns what became of it; never throws. Tests
/// replace the database with it.
using job_attempt_fn = std::function<db::job_result(const job_definition&)>;

/// A registered job with its counts.
struct job_entry {
  std::shared_ptr<const job_definition> def;
  /// Its counts (never null), kept across restarts of the worker.
  std::shared_ptr<job_metrics> metrics;
};

/// What the runner needs: the jobs and where to connect.
struct job_runner_settings {
  std::vector<job_entry> jobs;
  session_options session;
};

/// State of the job runner.
struct job_runner_state {
  struct scheduled {
    job_entry job;
    std::chrono::steady_clock::time_point next_due;
  };

  std::vector<scheduled> jobs;
  std::unique_ptr<db_session> session;
  job_attempt_fn attempt;
  /// The delay of the armed timer (until the next due job).
  std::optional<std::chrono::milliseconds> next_timeout;
  /// "jobs": the runner's logger and its name in log lines.
  std::string name = "jobs";
};

/// Returns when a job whose run was due at `due` and happened at `now` is
/// due next: one interval after `due`, or one interval after `now` when
/// runs were missed (a slow run, an outage), so that missed runs are
/// skipped rather than run back to back.
std::chrono::steady_clock::time_point
next_due_after(std::chrono::steady_clock::time_point due,
               std::chrono::steady_clock::time_point now,
               std::chrono::milliseconds interval);

/// Counts `res`, the attempt of `job` that took `took_ms`, in the job's
/// metrics and logs it on one line under `origin` (a run at info, or at
/// debug when it said more work is left; a skip at debug, a failure at
/// warning). Shared by the runner and tick runs.
void record_job_attempt(const job_entry& job, const db::job_result& res,
                        int64_t took_ms, const std::string& origin);

/// The runner's behaviour: runs every job at once at the start, then each
/// at its interval (next_due_after), or after its busy interval when its
/// last run said more work is left (job_context::more); counts each attempt in the job's
/// metrics (ran, skipped or failed) and logs it on one line (a run at info,
/// a skip at debug, a failure at warning). A failed run rolled back; the
/// job runs again at its next interval.
/// @param self The runner.
/// @param settings The jobs and the database.
/// @param attempt How it runs one job; the database (db::run_job_once on
///        its session) when empty.
job_runner_actor::behavior_type
job_runner(job_runner_actor::stateful_pointer<job_runner_state> self,
           job_runner_settings settings, job_attempt_fn attempt);

/// Spawns the production job runner of `settings` (detached).
job_runner_actor spawn_job_runner(caf::actor_system& sys,
                                  job_runner_settings settings);

} // namespace cmdbus::actors
