#pragma once

// A process writer: a detached actor with a connection of its own that
// applies replies to their processes. Per reply: the process row locked,
// its audit trail read, the transition decided by its workflow, the process
// row, the reply fields, the next command with its audit row and the batch
// counters written, and the reply message deleted, together
// (process/store.hpp writes all but the delete). The replies that arrived
// together (up to max_group) share one transaction and its statements
// (process_store::apply_many): the processes locked and their trails read
// in one round trip, the writes of every reply of the group in another, the
// messages deleted in a third, one commit (each process has one reply in
// flight at most, and a process always goes to the same writer). When one
// of them cannot apply, the transaction is rolled back and each is applied
// in a transaction of its own. A crash or a cut connection at any point
// leaves either all of a group's writes or none, and its replies then come
// again.
//
// A router has a few writers (process_settings::writers); the process
// actors of its processes share them.

#include <chrono>
#include <memory>
#include <string>

#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/process/process_settings.hpp"
#include "cmdbus/process/store.hpp"

namespace cmdbus::actors {

/// How a process writer reaches the database (the replies of one group,
/// an outcome for each, in order); tests replace it.
using apply_fn = std::function<std::vector<apply_outcome>(
  const std::vector<process_reply_message>&)>;
using sweep_fn = std::function<int64_t()>;

struct process_writer_state {
  /// The most replies that share a transaction.
  static constexpr size_t max_group = 64;

  process_settings settings;
  std::unique_ptr<db_session> session;
  process_store store;
  apply_fn apply;
  sweep_fn sweep;
  /// Replies received and not applied yet, with their answers.
  std::vector<process_reply_message> buffer;
  std::vector<caf::typed_response_promise<apply_outcome>> answers;
  /// A flush message is in the mailbox (behind the replies that arrived
  /// with this one).
  bool flush_scheduled = false;
  /// "process-writer/<domain>".
  std::string name;
};

/// Applies `m` in a transaction of its own on `st`'s session (see the top
/// of this file): never throws; a database that is unavailable is
/// apply_kind::retry.
apply_outcome apply_reply(process_writer_state& st,
                          const process_reply_message& m);

/// Applies `ms` in one transaction (see the top of this file); never
/// throws. Returns an outcome per reply, in order.
std::vector<apply_outcome>
apply_replies(process_writer_state& st,
              const std::vector<process_reply_message>& ms);

/// The writer's behaviour. Empty `apply` / `sweep` use the database.
process_writer_actor::behavior_type process_writer(
  process_writer_actor::stateful_pointer<process_writer_state> self,
  process_settings settings, apply_fn apply, sweep_fn sweep);

/// Spawns a production writer of `settings` (detached).
process_writer_actor spawn_process_writer(caf::actor_system& sys,
                                          const process_settings& settings);

} // namespace cmdbus::actors
