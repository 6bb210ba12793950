#pragma once

// The handlers of one domain on a handler node: `concurrency` node handler
// threads and a queue in front of them. Every session of the domain hands
// its worker's deliveries here; a node shared by several workers queues
// what exceeds its handlers. A drain (the node stops) refuses new
// deliveries and answers once nothing is queued or running.

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <caf/typed_response_promise.hpp>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/node/settings.hpp"

namespace cmdbus::actors {

/// Spawns one handler of a pool (tests spawn scheduled fakes).
using node_handler_spawner = std::function<node_handler_actor(
  node_pool_actor::pointer, const node_settings&, const std::string& domain)>;

/// The production spawner: a detached node handler linked to the pool.
node_handler_actor spawn_node_handler(node_pool_actor::pointer pool,
                                      const node_settings& settings,
                                      const std::string& domain);

/// State of a node pool.
struct node_pool_state {
  /// A delivery waiting for a free handler.
  struct pending {
    remote::wire_command cmd;
    remote::lease_actor lease;
    caf::typed_response_promise<remote::wire_outcome> promise;
  };
  node_settings settings;
  std::string domain;
  std::vector<node_handler_actor> idle;
  std::deque<pending> queue;
  int64_t running = 0;
  bool draining = false;
  std::vector<caf::typed_response_promise<atom::done>> drained;
  static inline const char* name = "node-pool";
};

/// The node pool's behaviour.
/// @param self The pool.
/// @param settings The node's shared settings.
/// @param domain The domain it serves.
/// @param spawn Spawns each of its `settings.concurrency` handlers.
node_pool_actor::behavior_type
node_pool(node_pool_actor::stateful_pointer<node_pool_state> self,
          node_settings settings, std::string domain,
          node_handler_spawner spawn = spawn_node_handler);

} // namespace cmdbus::actors
