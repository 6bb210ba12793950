#pragma once

// A handler thread of a handler node: runs the deliveries its pool hands
// it, one at a time, with the application's handlers
// (handler_registry::run), and sends their visibility extensions back to
// the worker through the delivery's lease actor.

#include <string>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/node/settings.hpp"

namespace cmdbus::actors {

/// State of a node handler.
struct node_handler_state {
  node_settings settings;
  std::string domain;
  static inline const char* name = "node-handler";
};

/// The node handler's behaviour: answers (handle, delivery, lease) with the
/// outcome; a delivery that does not decode, or names another domain, is a
/// permanent failure REMOTE_DECODE_ERROR.
/// @param self The node handler (detached: handlers may block).
/// @param settings The node's shared settings.
/// @param domain The domain whose handlers it runs.
node_handler_actor::behavior_type
node_handler(node_handler_actor::stateful_pointer<node_handler_state> self,
             node_settings settings, std::string domain);

} // namespace cmdbus::actors
