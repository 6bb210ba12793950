#pragma once

// The door of a handler node: the one actor it publishes (frozen
// remote::node_door_actor). A worker's hello names its protocol version,
// its name, the domain and its lease actor; the door refuses another
// protocol version or a domain it does not serve (logged here and answered
// with an error), or spawns a session for that worker and domain and
// answers the node's offer. The door links the pools and the sessions: its
// end ends everything.

#include <map>
#include <string>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/node/settings.hpp"

namespace cmdbus::actors {

/// State of the door.
struct door_state {
  node_settings settings;
  /// The pools by domain.
  std::map<std::string, node_pool_actor> pools;
  static inline const char* name = "node-door";
};

/// The door's behaviour.
/// @param self The door.
/// @param settings The node's shared settings.
/// @param pools The pools by domain (linked to the door).
remote::node_door_actor::behavior_type
door(remote::node_door_actor::stateful_pointer<door_state> self,
     node_settings settings, std::map<std::string, node_pool_actor> pools);

} // namespace cmdbus::actors
