#pragma once

// Retention: removing old finished history (docs/operations.md,
// "Retention") through the chunk functions of migration V013. A prune is a
// sequence of chunks, each one short transaction that removes at most a
// chunk's rows of one kind together with what belongs to them (a command
// with its audit rows, a process with its process_audit rows, a batch with
// its BATCH_* audit rows): interrupting it between chunks or during one
// leaves nothing half removed, and running it again goes on where it
// stopped. Per domain the kinds go in this order: commands, processes,
// batches (a batch goes once its commands and processes are gone), the
// maintenance of the domain's partitioned queues (one queue per chunk:
// partitions created ahead, old ones dropped whole; whatever the ages),
// then the archives of the domain's queues. Every chunk holds the advisory
// lock of the retention job (retention_job_name, db/jobs.hpp), so the
// worker's runner and `cmdbus prune` never prune at the same time. No CAF
// headers.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cmdbus {

/// How old each kind of history must be to be removed, counted from when it
/// became final; unset: that kind is kept.
struct retention_ages {
  /// Finished commands (COMPLETED, FAILED, CANCELED) with their audit rows
  /// and their API request fingerprints, by the time of their last change.
  std::optional<std::chrono::milliseconds> commands;
  /// Final processes with their process_audit rows, by their last change.
  std::optional<std::chrono::milliseconds> processes;
  /// Final batches with their BATCH_* audit rows, by their completion.
  std::optional<std::chrono::milliseconds> batches;
  /// Messages of the PGMQ archive tables, by their archiving.
  std::optional<std::chrono::milliseconds> archive;

  /// Whether any kind is pruned.
  bool any() const noexcept {
    return commands || processes || batches || archive;
  }
};

/// Rows removed by a prune (or that a preview found removable).
struct prune_counts {
  int64_t commands = 0;
  int64_t command_audits = 0;
  int64_t processes = 0;
  int64_t process_audits = 0;
  int64_t batches = 0;
  int64_t batch_audits = 0;
  int64_t archived_messages = 0;
  /// The command API's request fingerprints (cmdbus_api_request, V017) of
  /// the commands removed.
  int64_t api_requests = 0;
  /// Partitions of partitioned queues (docs/operations.md, "Partitioned
  /// queues") their maintenance created, dropped whole (past their
  /// queue's retention, holding nothing still needed), and kept although
  /// past retention (holding a message still needed, or the queue's lock
  /// was not granted in time). Not rows: total() leaves them out.
  int64_t partitions_created = 0;
  int64_t partitions_dropped = 0;
  int64_t partitions_kept = 0;

  prune_counts& operator+=(const prune_counts& x) noexcept;

  /// Every row counted.
  int64_t total() const noexcept;
};

namespace db {

class connection;

/// The name of the retention job: its advisory lock key is
/// job_lock_key(retention_job_name).
inline constexpr const char* retention_job_name = "cmdbus.retention";

/// One pass of a prune over its domains and kinds, a chunk at a time. The
/// caller runs each chunk in a transaction of its own (holding the
/// retention lock); a chunk that fails can simply be run again.
class prune_pass {
public:
  /// A pass over `domains` (empty: every domain of the database, and the
  /// archive of every queue) with `ages`; chunks of at most `chunk_size`
  /// rows of a kind (>= 1).
  prune_pass(std::vector<std::string> domains, retention_ages ages,
             int chunk_size);

  /// Runs the next chunk on `conn` (in the caller's transaction) and
  /// returns what it removed. A chunk that removed fewer rows than a chunk
  /// moves the pass on to the next kind (or queue, or domain). Throws
  /// db::error; the pass is then where it was.
  prune_counts step(connection& conn);

  /// Whether every kind of every domain came back with less than a chunk.
  bool done() const noexcept;

  /// Starts the pass again from the first domain and kind.
  void restart() noexcept;

  /// Where the pass is, for logs: "commands of D", "archive of Q", "done".
  std::string position() const;

private:
  enum class stage {
    commands,
    processes,
    batches,
    partitions,
    archive,
    next_domain
  };

  // Skips the kinds whose age is unset; moves to the next domain at the end.
  void settle() noexcept;

  std::vector<std::optional<std::string>> domains_;
  retention_ages ages_;
  int chunk_size_;
  size_t domain_ = 0;
  stage stage_ = stage::commands;
  /// The queues of the current domain's partitions or archive stage
  /// (loaded on entering it) and the one being maintained or pruned.
  std::optional<std::vector<std::string>> queues_;
  size_t queue_ = 0;
};

/// Counts what a whole prune of `domains` (empty: every domain) with
/// `ages` would remove now, changing nothing.
prune_counts preview_prune(connection& conn,
                           const std::vector<std::string>& domains,
                           const retention_ages& ages);

} // namespace db
} // namespace cmdbus
