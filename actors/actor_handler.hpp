#pragma once

// Registering an application's own actor as a command handler (CAF
// headers; include only where actors are used).

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>

#include "cmdbus/actors/handler_actor.hpp"
#include "cmdbus/actors/handler_registry.hpp"

namespace cmdbus {

/// Registers `hdl` (an actor of `sys`) as the handler of (domain,
/// command_type). Each command becomes a request with `timeout`; a timeout,
/// an error reply or a dead actor is a transient failure with error code
/// HANDLER_ACTOR_UNAVAILABLE. Throws handler_already_registered_error like
/// handler_registry::add.
void add_actor_handler(handler_registry& registry, const std::string& domain,
                       const std::string& command_type, caf::actor_system& sys,
                       command_handler_actor hdl,
                       std::chrono::milliseconds timeout);

} // namespace cmdbus
