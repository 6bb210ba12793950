#pragma once

// The Debit handler: a plain function, run on the worker's handler threads.

#include <cmdbus/actors/handler_registry.hpp>
#include <cmdbus/model/json.hpp>
#include <cmdbus/model/types.hpp>

namespace payments {

/// Takes the amount from the account and answers {"account": ...,
/// "amount_cents": ..., "debit_id": ...}. Data without an account or an
/// amount can never succeed: a permanent failure (the troubleshooting
/// queue).
cmdbus::json debit(const cmdbus::command& cmd, cmdbus::handler_context& ctx);

} // namespace payments
