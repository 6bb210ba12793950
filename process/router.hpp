#pragma once

// The reply router of one process reply queue of a domain (the shared
// `{domain}__process_replies`, or a queue of its own of some process
// types): reads it (at most max_in_flight replies not yet dealt with; woken
// by LISTEN/NOTIFY, polling as a fallback, with the poller's recovery
// rules), and routes each reply by its correlation id to the process actor
// of that process, spawning one when none runs. It reads only the replies to
// processes of the types it serves (process_settings::types) and messages
// that no process manager can apply; every other message stays untouched
// for the manager that serves it (docs/processes.md). A message that is
// not a reply, or has no correlation id, is archived with a log line at
// once: it can never apply. One router per domain also sweeps for the
// processes of its types whose step's command went to the troubleshooting
// queue (WAITING_FOR_TSQ).
//
// It runs under the worker's root beside the domain supervisors: restarted
// with backoff when it dies, drained before the worker stops (no more
// reads; every reply in flight dealt with).

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/worker/listener.hpp"
#include "cmdbus/process/process_settings.hpp"

namespace cmdbus::actors {

/// A message as read from the reply queue.
struct raw_reply {
  int64_t msg_id = 0;
  int read_ct = 0;
  std::string body;
};

/// How the router reads (visibility timeout in seconds, most messages) and
/// archives (msg_id) messages; tests replace the database with them.
struct router_io {
  std::function<std::vector<raw_reply>(int, int)> read;
  std::function<void(int64_t)> archive;
};

/// Spawns a process writer linked to the router (fakes in tests).
using process_writer_spawner = std::function<process_writer_actor(
  process_router_actor::pointer, const process_settings&)>;

struct process_router_state {
  process_settings settings;
  std::unique_ptr<db_session> session;
  router_io io;
  process_writer_spawner spawn_writer;
  std::unique_ptr<listener> listen;
  std::vector<process_writer_actor> writers;

  /// A process with a running actor, and its replies on the way to it or
  /// being dealt with.
  struct running {
    process_actor actor;
    int64_t pending = 0;
  };
  std::map<uuid, running> processes;
  /// Replies routed and not yet dealt with (all processes).
  int64_t in_flight = 0;

  bool draining = false;
  std::vector<caf::typed_response_promise<atom::done>> drains;
  /// Whether a wakeup is in the mailbox (ours or the listener's): replies
  /// that arrive before it are claimed in one read.
  std::shared_ptr<wakeup_latch> wake = std::make_shared<wakeup_latch>();
  /// When to read again if nothing else happens; unset while draining.
  std::optional<std::chrono::milliseconds> next_poll;
  int empty_reads = 0;
  std::chrono::steady_clock::time_point next_sweep;
  std::mt19937_64 rng{std::random_device{}()};
  /// "process-router/<domain>".
  std::string name;
};

/// The router's behaviour.
/// @param self The router.
/// @param settings Its domain's process settings.
/// @param io How it reads and archives; the database when empty.
/// @param spawn_writer Spawns its writers; production ones when empty.
process_router_actor::behavior_type process_router(
  process_router_actor::stateful_pointer<process_router_state> self,
  process_settings settings, router_io io, process_writer_spawner spawn_writer);

/// Spawns the production router of `settings` (detached).
process_router_actor spawn_process_router(caf::actor_system& sys,
                                          const process_settings& settings);

} // namespace cmdbus::actors
