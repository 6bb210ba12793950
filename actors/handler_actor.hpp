#pragma once

// What an application's own handler actor needs (CAF headers): the message
// it receives and the typed interface it implements. Register such an actor
// with add_actor_handler (actors/actor_handler.hpp).

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "cmdbus/model/outcome.hpp"

namespace cmdbus::atom {

/// Handler: run one command, reply with its outcome.
using handle = caf::atom_constant<caf::atom("handle")>;

} // namespace cmdbus::atom

namespace cmdbus {

/// The interface of an actor that handles commands: it gets the received
/// command (with attempt, max_attempts and msg_id) and replies with the
/// outcome (success with its result, or a failure kind with error code,
/// message and details).
using command_handler_actor = caf::typed_actor<
  // Handles one command.
  caf::replies_to<atom::handle, received_command>::with<outcome>>;

} // namespace cmdbus

// Commands and outcomes travel between actors of one process only.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cmdbus::received_command)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cmdbus::outcome)
