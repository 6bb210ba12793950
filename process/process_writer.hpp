#pragma once

// A process writer: a detached actor with a connection of its own that
// applies replies to their processes, each in one transaction: the process
// row locked, its audit trail read, the transition decided by its workflow,
// the process row, the reply fields, the next command with its audit row
// and the batch counters written, and the reply message deleted, together
// (process/store.hpp writes all but the delete). A crash at any point
// leaves either all of it or none, and the reply then comes again.
//
// A router has a few writers (process_settings::writers); the process
// actors of its processes share them.

#include <chrono>
#include <memory>
#include <string>

#include "actors/db_session.hpp"
#include "actors/interfaces.hpp"
#include "process/process_settings.hpp"
#include "process/store.hpp"

namespace cmdbus::actors {

/// How a process writer reaches the database; tests replace it.
using apply_fn = std::function<apply_outcome(const process_reply_message&)>;
using sweep_fn = std::function<int64_t()>;

struct process_writer_state {
  process_settings settings;
  std::unique_ptr<db_session> session;
  process_store store;
  apply_fn apply;
  sweep_fn sweep;
  /// "process-writer/<domain>".
  std::string name;
};

/// Applies `m` on `st`'s session (see the top of this file): never throws;
/// a database that is unavailable is apply_kind::retry.
apply_outcome apply_reply(process_writer_state& st,
                          const process_reply_message& m);

/// The writer's behaviour. Empty `apply` / `sweep` use the database.
process_writer_actor::behavior_type process_writer(
  process_writer_actor::stateful_pointer<process_writer_state> self,
  process_settings settings, apply_fn apply, sweep_fn sweep);

/// Spawns a production writer of `settings` (detached).
process_writer_actor spawn_process_writer(caf::actor_system& sys,
                                          const process_settings& settings);

} // namespace cmdbus::actors
