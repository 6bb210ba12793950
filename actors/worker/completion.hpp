#pragma once

// The completion writer of a domain: the final side effects of finished
// commands (success, troubleshooting queue, business-rule failure), written
// in group commits (actors/worker/group_commit.hpp).

#include <functional>
#include <vector>

#include "cmdbus/actors/worker/group_commit.hpp"
#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/db/worker_store.hpp"

namespace cmdbus::actors {

/// How the completion writer writes one buffer: one transaction, throwing
/// on failure; returns the batches that became complete and what became
/// of each outcome.
using finish_fn
  = std::function<db::finish_result(const std::vector<db::finished_command>&)>;

/// State of the completion writer.
struct completion_state : writer_state<db::finished_command> {
  using handle_type = completion_actor;
  using item_atom = atom::finish;
  using pointer = completion_actor::stateful_pointer<completion_state>;

  finish_fn write;

  /// Writes the first `n` buffered outcomes as one transaction, counts
  /// them, drops them from the buffer and reports them to the supervisor
  /// (batches, then committed).
  static void commit(pointer self, size_t n);

  /// The database refused the first buffered outcome alone: it goes to the
  /// troubleshooting queue instead, with the refusal as its error and no
  /// reply.
  static void refused(pointer self, const std::exception& e);

  static inline const char* role = "completion";
  static constexpr db_actor metrics_actor = db_actor::completion;
};

/// The completion writer's behaviour: buffers (atom::finish,
/// db::finished_command) and writes through `write` (the database when
/// empty) when its mailbox ran empty and the oldest item waited
/// flush_interval, when 512 are buffered, on (atom::flush), and on exit
/// (unless the database is failing); a failed write keeps the buffer and is
/// retried after a backoff (up to 2 s), also while items keep arriving.
/// Reports (atom::batches, domain, ids) and then (atom::committed, n) to
/// `parent` after each commit, and (atom::unavailable) after a write failed
/// for want of the database.
/// @param self The writer.
/// @param settings Its domain's settings.
/// @param parent Its supervisor.
/// @param write How a buffer is written; the database when empty.
completion_actor::behavior_type
completion(completion_state::pointer self, domain_settings settings,
           writer_parent_actor parent, finish_fn write);

/// Spawns a completion writer: detached in production, scheduled
/// (`detached` false) in tests.
completion_actor spawn_completion_writer(caf::actor_system& sys,
                                         const domain_settings& settings,
                                         writer_parent_actor parent,
                                         finish_fn write, bool detached);

} // namespace cmdbus::actors
