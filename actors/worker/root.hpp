#pragma once

// The worker's root supervisor: one supervisor per domain and one process
// reply router per domain with process managers, each restarted with
// backoff when it dies, and the process-wide batch counter.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include <caf/typed_response_promise.hpp>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/process/process_settings.hpp"

namespace cmdbus::actors {

/// Spawns one domain supervisor, linked to the root.
using domain_spawner = std::function<supervisor_actor(root_actor::pointer,
                                                      const domain_settings&)>;

/// Spawns the batch counter, linked to the root.
using counter_spawner = std::function<batch_counter_actor(root_actor::pointer)>;

/// Spawns one process reply router, linked to the root.
using router_spawner = std::function<process_router_actor(
  root_actor::pointer, const process_settings&)>;

/// State of the worker's root supervisor.
struct root_state {
  std::vector<domain_settings> domains;
  domain_spawner spawn;
  counter_spawner spawn_counter;
  /// The batch counter (replaced when it dies).
  batch_counter_actor counter;
  /// The live supervisor of each domain (invalid while restarting).
  std::vector<supervisor_actor> supervisors;
  /// Consecutive restarts per domain (reset after a stable minute).
  std::vector<int> restarts;
  std::vector<std::chrono::steady_clock::time_point> started;
  /// The process reply routers, restarted like the supervisors; in the
  /// restart bookkeeping (atom::restart, restarts, started) a router is
  /// number domains.size() + its index.
  std::vector<process_settings> process_domains;
  router_spawner spawn_router;
  std::vector<process_router_actor> routers;
  /// A drain under way: the units (numbered like the restart bookkeeping)
  /// that have not answered yet, and its answer.
  struct drain_request {
    std::vector<bool> waiting;
    size_t left = 0;
    caf::typed_response_promise<atom::done> rp;
  };
  /// The drains under way, by number (a stop may ask while an admin drain
  /// waits).
  std::map<uint64_t, drain_request> drains;
  uint64_t next_drain = 0;
  /// Set by the first drain: nothing is started or restarted any more.
  bool stopping = false;
  static inline const char* name = "worker-root";
};

/// Returns the delay before restarting a domain after `restarts`
/// consecutive crashes: 1 s doubling up to 60 s.
std::chrono::milliseconds restart_delay(int restarts);

/// The root's behaviour: runs one supervisor per domain and restarts a
/// domain whose supervisor died, with backoff, so one domain's crash loop
/// never takes the others down; runs the batch counter, replaced at once
/// when it dies, and forwards (atom::batches, domain, ids) to it. Answers
/// (atom::drain) with atom::done once every domain and router drained (or
/// ended: what it held reappears after its visibility timeout) and the
/// batch counter ran the callbacks of everything reported before; after a
/// drain nothing is restarted.
/// @param self The root.
/// @param domains The settings of each domain.
/// @param spawn Spawns a domain's supervisor (fakes in tests).
/// @param spawn_counter Spawns the batch counter (fakes in tests).
/// @param process_domains The settings of each process reply router.
/// @param spawn_router Spawns a router (fakes in tests).
root_actor::behavior_type
root(root_actor::stateful_pointer<root_state> self,
     std::vector<domain_settings> domains, domain_spawner spawn,
     counter_spawner spawn_counter,
     std::vector<process_settings> process_domains = {},
     router_spawner spawn_router = {});

} // namespace cmdbus::actors
