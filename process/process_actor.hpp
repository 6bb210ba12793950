#pragma once

// A process actor: the replies of one process, one at a time. Spawned by
// its domain's router when a reply for the process arrives and none runs,
// it hands each reply to a process writer (which applies it in one
// transaction) and tells the router when the reply is dealt with; it waits
// and tries again while the database is unavailable. After
// process_settings::idle_after without a reply it tells the router, which
// stops it unless a reply for it is already on the way.

#include <chrono>
#include <deque>
#include <string>

#include "cmdbus/actors/interfaces.hpp"

namespace cmdbus::actors {

struct process_actor_state {
  uuid process_id;
  process_router_actor router;
  process_writer_actor writer;
  /// Replies received and not yet dealt with; the front one is with the
  /// writer while `busy`.
  std::deque<process_reply_message> replies;
  bool busy = false;
  /// "process/<domain>".
  std::string name;
};

/// The process actor's behaviour.
/// @param self The process actor.
/// @param process_id Its process.
/// @param domain Its domain (for the log).
/// @param router Its router (linked to it).
/// @param writer The writer that applies its replies.
/// @param idle_after How long without a reply before it reports idle.
process_actor::behavior_type process_actor_behavior(
  process_actor::stateful_pointer<process_actor_state> self, uuid process_id,
  std::string domain, process_router_actor router, process_writer_actor writer,
  std::chrono::milliseconds idle_after);

} // namespace cmdbus::actors
