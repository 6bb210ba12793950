#pragma once

// What the actors of a handler node share (the facade is actors/node.hpp):
//
//   door (published; remote::node_door_actor, frozen)
//    ├─ node pool × domain  (a queue and `concurrency` handler threads)
//    │   └─ node handler × concurrency (detached; handler_registry::run)
//    └─ session × (worker, domain) (remote::handler_pool_actor)
//
// A worker connects to the door and says hello with its protocol version;
// the door refuses another version (logged, answered with
// ec::protocol_mismatch) or spawns a session for that worker and domain and
// answers the offer. The session takes the worker's commands and hands them
// to its domain's pool with the worker's lease actor, where a free handler
// runs them; a handler's extend_visibility goes back to the worker through
// that lease. A session ends when its worker's lease actor goes down (the
// worker or its domain restarted, or the connection dropped). The door
// links the pools and the sessions: its end ends everything. No node actor
// opens a database connection.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cmdbus/actors/handler_registry.hpp"

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

/// The command types of `domain` in `registry`, sorted.
std::vector<std::string> command_types(const handler_registry& registry,
                                       const std::string& domain);

} // namespace cmdbus::actors
