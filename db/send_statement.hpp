#pragma once

// One command sent with one statement: what `send` runs on a caller's
// connection and what a combined transaction of concurrent sends is made
// of; and how the send SQL reports the failures a caller gets to see.

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/prepared_command.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus::db {

// -- failures of the send SQL ------------------------------------------------

/// SQLSTATE of an unknown batch id, raised by cmdbus_send_commands
/// (sql/commandbus/V003__cmdbus_send.sql); the bus does not call
/// cmdbus_send_command, the one that raises CB001.
inline constexpr const char* sqlstate_batch_not_found = "CB002";

/// SQLSTATE of a unique violation.
inline constexpr const char* sqlstate_unique_violation = "23505";

/// Returns whether `e` is the unique index on (domain, command_id)
/// rejecting a command id that exists.
bool is_duplicate_command(const error& e);

// -- one send ----------------------------------------------------------------

/// Returns the statement that sends `p`: the message, the PENDING row, the
/// SENT audit and the NOTIFY, prepared once per queue and connection. For an
/// unknown batch it writes nothing and returns no row (see `sent`).
connection::statement send_statement(const prepared_command& p);

/// Returns the outcome of `send_statement(p)`'s result `r`: its msg_id, or
/// throws `batch_not_found_error` when the statement wrote nothing.
send_result sent(const prepared_command& p, const result& r);

/// Sends `p` on `conn`, within whatever transaction is open there. Throws
/// `duplicate_command_error` for an existing (domain, command_id),
/// `batch_not_found_error` for an unknown batch, `db::error` otherwise.
send_result send_one(const prepared_command& p, connection& conn);

} // namespace cmdbus::db
