#pragma once

// The handler actor: runs the application's handlers for one domain, one
// command at a time.

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/spawn.hpp"

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
