#pragma once

// What the command API does with a command id that exists already: the
// same request again is a repeat (answered 200, nothing sent), anything
// else is a conflict (409).

#include <optional>
#include <string>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"

namespace cmdbus::api {

/// The existing command `req.command_id` of `req.domain` when it is what
/// `req` would send: the same type, reply_to, max_attempts (unset: the
/// bus's default), correlation_id (when `req` gives one), and, while its
/// message is kept (in the queue or its archive; a completed command's is
/// deleted), the same data (as PostgreSQL's jsonb compares) and priority.
/// Nothing when it differs or does not exist.
std::optional<command_metadata>
same_request(db::connection& conn, command_bus& bus, const send_request& req,
             int default_max_attempts = 3);

/// The result of the reply to `command_id` while the reply is in `queue`
/// (not yet read by its consumer); nothing when it is not there, the queue
/// does not exist, or its name is not one PGMQ takes.
std::optional<json> reply_result(db::connection& conn, const std::string& queue,
                                 const uuid& command_id);

} // namespace cmdbus::api
