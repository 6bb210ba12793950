#pragma once

// One worker's session on a handler node, for one domain: the versioned
// remote::handler_pool_actor the door answers a hello with. It passes the
// worker's deliveries to the domain's pool together with the worker's lease
// actor, and ends when that lease actor goes down (the worker or its domain
// restarted, or the connection dropped).

#include <string>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/node/settings.hpp"

namespace cmdbus::actors {

/// State of a session.
struct session_state {
  node_settings settings;
  node_pool_actor pool;
  remote::lease_actor lease;
  std::string worker;
  std::string domain;
  static inline const char* name = "node-session";

  ~session_state();
};

/// The session's behaviour; it counts itself in the node's sessions while
/// it lives.
/// @param self The session.
/// @param settings The node's shared settings.
/// @param pool The pool of the session's domain.
/// @param lease The worker's lease actor (monitored).
/// @param worker The worker's name, for the logs.
/// @param domain The session's domain.
remote::handler_pool_actor::behavior_type
session(remote::handler_pool_actor::stateful_pointer<session_state> self,
        node_settings settings, node_pool_actor pool, remote::lease_actor lease,
        std::string worker, std::string domain);

} // namespace cmdbus::actors
