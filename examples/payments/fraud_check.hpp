#pragma once

// The FraudCheck handler: a typed CAF actor of the application's own actor
// system, registered with cmdbus::add_actor_handler.

#include <cmdbus/actors/actor_handler.hpp>

namespace payments {

/// Answers each command with SUCCESS ({"approved": true}), or with a
/// business-rule failure FRAUD_SUSPECTED for amounts above
/// fraud_limit_cents (the command ends FAILED; a Payment process reverses
/// its Debit).
cmdbus::command_handler_actor::behavior_type fraud_check();

} // namespace payments
