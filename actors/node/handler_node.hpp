#pragma once

// The actors of a handler node (the facade is actors/node.hpp):
//
//   door (published; remote::node_door_actor, frozen)
//    ├─ node pool × domain  (a queue and `concurrency` handler threads)
//    │   └─ node handler × concurrency (detached; handler_registry::run)
//    └─ session × (worker, domain) (remote::handler_pool_actor)
//
// A worker connects to the door and says hello with its protocol version;
// the door refuses another version (logged here, answered with
// ec::protocol_mismatch) or spawns a session for that worker and domain and
// answers the offer. The session takes the worker's commands and hands them
// to its domain's pool with the worker's lease actor, where a free handler
// runs them; a handler's extend_visibility goes back to the worker through
// that lease. A session ends when its worker's lease actor goes down (the
// worker or its domain restarted, or the connection dropped). The door
// links the pools and the sessions: its end ends everything.
//
// Only actor code and actor tests include this (CAF headers).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/typed_actor.hpp>

#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/actors/remote_protocol.hpp"
#include "cmdbus/actors/node.hpp"

namespace cmdbus::actors {

/// The figures of a node, shared by its actors and the facade.
struct node_counters {
  std::atomic<int64_t> busy{0};
  std::atomic<int64_t> queued{0};
  std::atomic<int64_t> sessions{0};
  std::atomic<int64_t> completed{0};
};

/// The node's name, known once the port is bound (hellos come later).
struct node_name {
  mutable std::mutex mtx;
  std::string value;

  std::string get() const {
    std::lock_guard<std::mutex> guard{mtx};
    return value;
  }

  void set(std::string x) {
    std::lock_guard<std::mutex> guard{mtx};
    value = std::move(x);
  }
};

/// What the node's actors share.
struct node_settings {
  std::shared_ptr<const handler_registry> registry;
  /// Turns true when the node stops (handler_context::cancelled).
  std::shared_ptr<std::atomic<bool>> cancelled;
  std::shared_ptr<node_counters> counters;
  std::shared_ptr<node_name> name;
  int concurrency = 16;
  int64_t heartbeat_ms = 1000;
  std::chrono::milliseconds extend_timeout{30000};
};

/// A handler thread of the node: runs one command at a time.
using node_handler_actor = caf::typed_actor<
  /// From its pool: run this delivery; the lease actor takes the handler's
  /// extend_visibility calls. The answer is the outcome.
  caf::replies_to<atom::handle, remote::wire_command, caf::actor>::with<
    remote::wire_outcome>>;

/// The handlers of one domain on a node, with a queue.
using node_pool_actor = caf::typed_actor<
  /// From a session: run this delivery on a free handler (queued until one
  /// is free); the answer is its outcome, or ec::remote_unavailable once the
  /// node stops.
  caf::replies_to<atom::handle, remote::wire_command, caf::actor>::with<
    remote::wire_outcome>,
  /// From the facade (stop): take no more commands; answers atom::done once
  /// none is queued or running.
  caf::replies_to<atom::drain>::with<atom::done>>;

/// The command types of `domain` in `registry`, sorted.
std::vector<std::string> command_types(const handler_registry& registry,
                                       const std::string& domain);

/// Spawns the pool of `domain` with `settings.concurrency` handlers.
node_pool_actor spawn_node_pool(caf::actor_system& sys,
                                const node_settings& settings,
                                const std::string& domain);

/// Spawns the door over `pools` (by domain), linked to them.
remote::node_door_actor
spawn_node_door(caf::actor_system& sys, const node_settings& settings,
                std::map<std::string, node_pool_actor> pools);

} // namespace cmdbus::actors
