#pragma once

// Decoding result rows into the model's types: command metadata, batch
// metadata and audit events, and the typed fields they are made of. The
// column lists name the order the decoders expect.

#include <optional>
#include <vector>

#include "cmdbus/db/result.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::db {

// -- column lists ------------------------------------------------------------

/// The columns of commandbus.command that `to_command_metadata` decodes, in
/// its order.
inline constexpr const char* command_columns
  = "domain, command_id, command_type, status, attempts, max_attempts, "
    "msg_id, correlation_id, reply_queue, last_error_type, last_error_code, "
    "last_error_msg, created_at, updated_at, batch_id";

/// The columns of commandbus.batch that `to_batch_metadata` decodes, in its
/// order.
inline constexpr const char* batch_columns
  = "domain, batch_id, name, custom_data, status, batch_type, total_count, "
    "completed_count, failed_count, canceled_count, in_troubleshooting_count, "
    "created_at, started_at, completed_at";

/// The columns of commandbus.audit that `to_audit_event` decodes, in its
/// order.
inline constexpr const char* audit_columns
  = "audit_id, domain, command_id, event_type, ts, details_json";

// -- fields ------------------------------------------------------------------

/// Returns the field as a UUID; throws `command_bus_error` for other text.
uuid uuid_at(const result& r, int row, int col);

/// Returns the field as a UUID, or `std::nullopt` for NULL.
std::optional<uuid> opt_uuid_at(const result& r, int row, int col);

/// Returns the field as a timestamp; throws `command_bus_error` for other
/// text.
timestamp time_at(const result& r, int row, int col);

/// Returns the field as a timestamp, or `std::nullopt` for NULL.
std::optional<timestamp> opt_time_at(const result& r, int row, int col);

/// Returns the field as JSON, or `std::nullopt` for NULL.
std::optional<json> opt_json_at(const result& r, int row, int col);

/// Returns the field as an `int`.
int int_at(const result& r, int row, int col);

// -- rows --------------------------------------------------------------------

/// Decodes row `i` of a result with the `command_columns`.
command_metadata to_command_metadata(const result& r, int i);

/// Decodes every row of a result with the `command_columns`.
std::vector<command_metadata> to_commands(const result& r);

/// Decodes row `i` of a result with the `batch_columns`.
batch_metadata to_batch_metadata(const result& r, int i);

/// Decodes every row of a result with the `batch_columns`.
std::vector<batch_metadata> to_batches(const result& r);

/// Decodes row `i` of a result with the `audit_columns`.
audit_event to_audit_event(const result& r, int i);

} // namespace cmdbus::db
