#pragma once

// The worker's metrics: per domain and per command type the tallies the
// actors keep in atomics (updated where the work happens: one relaxed
// increment per event, never a query), read only when somebody asks (a
// scrape of the HTTP endpoint, worker::metrics()). They are the worker's one
// store of counts: the worker-wide figures (worker::stats()) are their sums
// over the domains, and every status view (status page, /metrics, the admin
// actor) is built from them (status_snapshot.hpp). Plain C++ (no CAF).

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace cmdbus {

/// Upper bounds in seconds of the handler duration histogram's buckets
/// (a last bucket, +Inf, takes the rest): from 1 ms, since most handlers
/// of a command bus answer in milliseconds, to a minute.
inline constexpr std::array<double, 15> duration_buckets = {
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
  0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};

/// A histogram of handler durations, updated lock-free.
class duration_histogram {
public:
  /// What a reader sees: counts per bucket (cumulative, as Prometheus
  /// wants them; the last one is +Inf and equals `count`) and the sum.
  struct snapshot {
    std::array<int64_t, duration_buckets.size() + 1> cumulative{};
    int64_t count = 0;
    double sum_seconds = 0;
  };

  void observe(std::chrono::nanoseconds d) noexcept;
  snapshot read() const noexcept;

private:
  std::array<std::atomic<int64_t>, duration_buckets.size() + 1> counts_{};
  std::atomic<int64_t> sum_ns_{0};
};

/// The tallies of one command type of one domain. The outcomes count what
/// was committed, so they match the database: `completed` (COMPLETED),
/// `failed` (a business-rule failure: FAILED), `retried` (a retry
/// scheduled), `moved_to_tsq` (a permanent failure or exhausted retries).
struct type_metrics {
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> failed{0};
  std::atomic<int64_t> retried{0};
  std::atomic<int64_t> moved_to_tsq{0};
  /// From handing the command to a handler to its outcome.
  duration_histogram duration;
};

/// The outcome tallies of some command types added up.
struct outcome_totals {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t retried = 0;
  int64_t moved_to_tsq = 0;

  /// Commands finished: those with a final outcome (completed, failed or
  /// moved to the TSQ). A retry is not one: the command runs again. The
  /// one definition behind every throughput figure.
  int64_t finished() const noexcept {
    return completed + failed + moved_to_tsq;
  }
};

/// The actors of a domain that use the database, as counted in
/// cmdbus_db_errors_total{actor}.
enum class db_actor { poller, completion, retry_scheduler };

/// Returns "poller", "completion" or "retry_scheduler".
const char* to_string(db_actor a) noexcept;

inline constexpr std::array<db_actor, 3> all_db_actors = {
  db_actor::poller, db_actor::completion, db_actor::retry_scheduler};

/// The metrics of one domain, shared by its actors and kept across restarts
/// of the worker (counters only grow, as Prometheus expects).
class domain_metrics {
public:
  /// Command types beyond the registered ones (commands nobody handles,
  /// which fail) get their own series up to this many; the rest are
  /// counted under the type "other", so that a queue full of odd types
  /// cannot grow the metrics without bound.
  static constexpr size_t max_unregistered_types = 50;

  domain_metrics(std::string domain, int64_t slots,
                 const std::vector<std::string>& registered_types);

  const std::string& domain() const noexcept {
    return domain_;
  }

  /// The handler slots (the worker's concurrency).
  int64_t slots() const noexcept {
    return slots_;
  }

  /// Returns the tallies of `command_type` (lock-free for registered
  /// types).
  type_metrics& of(std::string_view command_type);

  /// Calls `f(type, metrics)` for every type seen or registered, by name.
  template <class F>
  void for_each_type(F&& f) const {
    for (auto& [name, m] : registered_)
      f(name, *m);
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& [name, m] : others_)
      f(name, *m);
  }

  /// Messages handed to the domain's handlers (or claimed and refused).
  std::atomic<int64_t> received{0};
  /// Commands read and not yet handled (in a handler or waiting for one);
  /// never more than the domain's slots plus the prefetch.
  std::atomic<int64_t> in_flight{0};
  /// Messages the domain may read beyond its handler slots now: the fixed
  /// prefetch, or the one `prefetch = auto` chose last.
  std::atomic<int64_t> prefetch{0};
  /// Messages archived on receive (invalid, unknown or terminal command).
  std::atomic<int64_t> rejected{0};
  /// Outcomes not written because their delivery no longer held its
  /// message: read again meanwhile (its visibility timeout had expired),
  /// or its claim was lost by the database (a failover).
  std::atomic<int64_t> stale{0};
  /// Handler actors that died and were replaced.
  std::atomic<int64_t> handler_restarts{0};
  /// Handler slots of the connected remote pools (handler nodes).
  std::atomic<int64_t> remote_slots{0};
  /// Remote pools connected now.
  std::atomic<int64_t> remote_pools{0};
  /// Remote pools lost (down, cut or timed out) so far.
  std::atomic<int64_t> remote_disconnects{0};
  /// Schedule slots that sent a command (docs/scheduling.md, "Recurring
  /// schedules"), fired by this worker's scheduler.
  std::atomic<int64_t> schedule_fired{0};
  /// The sum of their lateness (slot time to the firing, by the database
  /// server's clock), in microseconds, and the last one's.
  std::atomic<int64_t> schedule_lateness_us{0};
  std::atomic<int64_t> schedule_last_lateness_us{0};

  /// Failed database round trips of `a` (each retried with backoff).
  std::atomic<int64_t>& db_errors(db_actor a) noexcept {
    return db_errors_[static_cast<size_t>(a)];
  }
  int64_t db_errors(db_actor a) const noexcept {
    return db_errors_[static_cast<size_t>(a)].load();
  }
  /// Failed database round trips of the domain's other clients: its
  /// process reply router and process writers, and the batch counter's
  /// deliveries of its batches. Part of worker_stats::db_errors; not a
  /// series of /metrics.
  std::atomic<int64_t> other_db_errors{0};
  /// Failed database round trips of every client of the domain.
  int64_t all_db_errors() const noexcept;

  /// The outcomes so far, over all types.
  outcome_totals totals() const;

  /// Commands finished so far (outcome_totals::finished), over all types:
  /// what throughput figures are computed from.
  int64_t finished() const;

private:
  std::string domain_;
  int64_t slots_;
  /// Fixed after construction: read without a lock.
  std::map<std::string, std::unique_ptr<type_metrics>, std::less<>> registered_;
  mutable std::mutex mtx_;
  std::map<std::string, std::unique_ptr<type_metrics>, std::less<>> others_;
  std::array<std::atomic<int64_t>, all_db_actors.size()> db_errors_{};
};

/// The counts of one singleton job (db/jobs.hpp), kept across restarts of
/// the worker: runs by outcome (cmdbus_job_runs_total{job,outcome}).
struct job_metrics {
  explicit job_metrics(std::string job_name) : name(std::move(job_name)) {}

  const std::string name;
  /// Runs that held the lock and committed.
  std::atomic<int64_t> ran{0};
  /// Attempts that found the lock held by another session.
  std::atomic<int64_t> skipped{0};
  /// Runs that threw or met a failing database (rolled back).
  std::atomic<int64_t> failed{0};
};

/// The counts of the worker's housekeeping runner ([retention],
/// docs/operations.md "Retention"), kept across restarts of the worker:
/// rows it removed by kind (cmdbus_retention_removed_total{kind}), the
/// chunks (transactions) that removed them, and the partitions of
/// partitioned queues its maintenance created and dropped.
struct retention_metrics {
  std::atomic<int64_t> commands{0};
  std::atomic<int64_t> command_audits{0};
  std::atomic<int64_t> processes{0};
  std::atomic<int64_t> process_audits{0};
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> batch_audits{0};
  std::atomic<int64_t> archived_messages{0};
  /// The command API's request fingerprints, removed with their commands.
  std::atomic<int64_t> api_requests{0};
  /// Partitions created ahead and dropped whole (past retention).
  std::atomic<int64_t> partitions_created{0};
  std::atomic<int64_t> partitions_dropped{0};
  /// Committed chunks.
  std::atomic<int64_t> chunks{0};
  /// Completed passes (a pass ends when nothing old is left).
  std::atomic<int64_t> passes{0};
};

} // namespace cmdbus
