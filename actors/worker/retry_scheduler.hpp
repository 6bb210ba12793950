#pragma once

// The retry scheduler of a domain: transient failures (their messages made
// visible again after a backoff), written in group commits
// (actors/worker/group_commit.hpp), and lease extensions.

#include <functional>
#include <vector>

#include "cmdbus/actors/worker/group_commit.hpp"
#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/db/worker_store.hpp"

namespace cmdbus::actors {

/// How the retry scheduler writes one buffer (one transaction, throws);
/// returns what became of each retry.
using reschedule_fn
  = std::function<db::reschedule_result(const std::vector<db::retry_command>&)>;

/// How the retry scheduler extends visibility timeouts (msg_ids, seconds,
/// keep_longer) -> messages that still exist; throws on failure.
using extend_fn = std::function<int(const std::vector<int64_t>&, int, bool)>;

/// State of the retry scheduler.
struct retry_scheduler_state : writer_state<db::retry_command> {
  using handle_type = retry_scheduler_actor;
  using item_atom = atom::retry;
  using pointer
    = retry_scheduler_actor::stateful_pointer<retry_scheduler_state>;

  reschedule_fn write;
  extend_fn extend;

  /// Writes the first `n` buffered retries as one transaction, counts
  /// them, drops them from the buffer and reports (atom::committed, n).
  static void commit(pointer self, size_t n);

  /// The database refused a retry alone: it is dropped (the command runs
  /// again when its visibility timeout ends).
  static void refused(pointer self, const std::exception& e);

  static inline const char* role = "retry-scheduler";
  static constexpr db_actor metrics_actor = db_actor::retry_scheduler;
};

/// The retry scheduler's behaviour: buffers (atom::retry, db::retry_command)
/// and writes like the completion writer (actors/worker/completion.hpp), and
/// answers (atom::extend, msg_ids, seconds, keep_longer) -> int at once.
/// @param self The retry scheduler.
/// @param settings Its domain's settings.
/// @param parent Its supervisor.
/// @param write How a buffer is written; the database when empty.
/// @param extend How visibility is extended; the database when empty.
retry_scheduler_actor::behavior_type
retry_scheduler(retry_scheduler_state::pointer self, domain_settings settings,
                writer_parent_actor parent, reschedule_fn write,
                extend_fn extend);

/// Spawns a retry scheduler: detached in production, scheduled (`detached`
/// false) in tests.
retry_scheduler_actor
spawn_retry_writer(caf::actor_system& sys, const domain_settings& settings,
                   writer_parent_actor parent, reschedule_fn write,
                   extend_fn extend, bool detached);

} // namespace cmdbus::actors
