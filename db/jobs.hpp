#pragma once

// Singleton jobs: periodic application work (a C++ callable, not a
// command) that must never run on two replicas at once. Every worker that
// registers a job tries it at its interval; one run is a transaction that
// first takes the job's transaction-scoped advisory lock
// (pg_try_advisory_xact_lock): the replica that gets it runs the job inside
// that transaction, the others skip that run. The server releases the lock
// when the transaction ends or the session dies (kill -9 included), so
// there is no lease row to expire or clean up (docs/scheduling.md,
// "Singleton jobs"). No CAF headers.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cmdbus {

namespace db {
class connection;
} // namespace db

/// What a job's callable gets: the connection of the run's transaction
/// (the one holding the job's lock; what it writes commits with the run,
/// and rolls back when the job throws) and the job's name.
struct job_context {
  db::connection& conn;
  const std::string& name;
  /// Set by the callable when work is left that a further run could do
  /// now (a job that works in bounded chunks): the next run is then due
  /// after the job's busy_interval instead of its interval.
  bool more = false;
  /// Run in order after the run's transaction committed (never when it
  /// rolled back): for counting what the run wrote.
  std::vector<std::function<void()>> on_commit{};
};

/// The work of a singleton job. Throwing fails the run: its transaction
/// rolls back and the job runs again at its next interval.
using job_fn = std::function<void(job_context&)>;

/// A registered singleton job.
struct job_definition {
  /// Unique per worker; the lock key derives from it (job_lock_key).
  std::string name;
  /// Time between runs (from one run's start to the next's).
  std::chrono::milliseconds interval{60000};
  job_fn fn;
  /// Time from a run that said more work is left (job_context::more) to the
  /// next run; 0: at once (another replica may take it).
  std::chrono::milliseconds busy_interval{0};
};

namespace db {

/// Returns the advisory lock key of job `name`: the 64-bit FNV-1a hash of
/// "cmdbus:job:" + name, as PostgreSQL's signed bigint. Stable across
/// builds, machines and releases (documented in docs/scheduling.md).
int64_t job_lock_key(std::string_view name) noexcept;

/// Returns whether job `name` belongs to shard `index` of `count` (tick
/// runs split by --shard-index/--shard-count): the FNV-1a hash of the name
/// modulo `count`. Every job belongs to the only shard when `count` <= 1.
bool job_in_shard(std::string_view name, int index, int count) noexcept;

/// What one attempt of a job came to.
enum class job_outcome {
  /// It held the lock and its callable returned: committed.
  ran,
  /// Another session held the lock: nothing ran.
  skipped,
  /// The callable threw, or the database failed: rolled back.
  failed,
};

/// Returns "ok", "skipped" or "failed" (the metrics' outcome label).
const char* to_string(job_outcome x) noexcept;

/// The result of run_job_once.
struct job_result {
  job_outcome outcome = job_outcome::skipped;
  /// Why it failed (one line), for failed runs.
  std::string error;
  /// The failure came from the database being unreachable or too slow (a
  /// lost connection, a restart, a statement timeout) rather than from the
  /// job's own code or an answer refusing a statement.
  bool unavailable = false;
  /// The run committed and said more work is left (job_context::more).
  bool more = false;
};

/// Runs `job` once on `conn`: BEGIN, pg_try_advisory_xact_lock(key), the
/// callable when the lock was granted, COMMIT; ROLLBACK when skipped or
/// failed. Never throws for a failure of the job or of the database: it is
/// the result (a broken connection is left for the caller to replace).
job_result run_job_once(connection& conn, const job_definition& job);

/// Runs `fn(conn)` in a transaction that first waits for the advisory lock
/// of job `name` (pg_advisory_xact_lock, the key of job_lock_key): work
/// done outside a worker's job runner (a command-line tool) that must not
/// overlap the job's runs. Commits when `fn` returns; when `fn` or the
/// database throws, rolls back and the exception propagates.
void run_under_job_lock(connection& conn, std::string_view name,
                        const std::function<void(connection&)>& fn);

} // namespace db
} // namespace cmdbus
