#pragma once

// The handler actor: runs the application's handlers for one domain, one
// command at a time.

#include <atomic>
#include <chrono>
#include <memory>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/worker/spawn.hpp"

namespace cmdbus::actors {

/// State of a handler actor.
struct handler_state {
  domain_settings settings;
  /// Takes the visibility extensions of the running command's handler.
  supervisor_actor supervisor;
  handler_mode mode = handler_mode::blocking;
  /// "handler/<domain>".
  std::string name;
};

/// Returns the extender of one delivery's handler_context. A blocking
/// handler waits for the answer (on its own thread, up to `timeout`); a
/// non-blocking one runs on a scheduler thread, which must never wait, so
/// its extension is only queued. Either way the request goes to `lease`:
/// in a worker its supervisor (which forwards it to its current retry
/// scheduler), on a handler node the worker's lease forwarder across the
/// network (which passes it on to that supervisor). After the
/// delivery ended (`live` false) the extender throws: the message may
/// already belong to someone else.
handler_context::extender
make_extender(caf::actor_system* sys, remote::lease_actor lease,
              int64_t msg_id, handler_mode mode,
              std::chrono::milliseconds timeout,
              std::shared_ptr<const std::atomic<bool>> live);

/// The handler actor's behaviour: answers (atom::handle, command) with the
/// outcome of the registered handler. Detached (a thread of its own) for
/// blocking handlers, so that they never stall CAF's scheduler; scheduled
/// for non-blocking ones.
/// @param self The handler actor.
/// @param settings Its domain's settings (the registry, the cancel flag).
/// @param supervisor Its supervisor (visibility extensions go there).
/// @param mode The mode of the handlers it runs.
handler_actor::behavior_type
handler(handler_actor::stateful_pointer<handler_state> self,
        domain_settings settings, supervisor_actor supervisor,
        handler_mode mode);

/// Spawns a production handler actor linked to `parent` (its supervisor):
/// detached for blocking handlers, scheduled for non-blocking ones.
handler_actor spawn_handler(supervisor_actor::pointer parent,
                            const domain_settings& settings, handler_mode mode);

} // namespace cmdbus::actors
