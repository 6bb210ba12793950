#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus::wire {

/// Encodes a command as the reference's PGMQ message: keys domain,
/// command_type, command_id, correlation_id (always present), data, and
/// reply_to only when set. `correlation_id` must be set by the caller (the
/// bus generates one when absent and uses it for the command row too, see
/// docs/design.md, "Correlation id and batch id on bulk sends"); an unset one
/// encodes as null.
/// Output is compact JSON (see wire.cpp). Throws `std::invalid_argument` when
/// `data` is not an object or a string field is not valid UTF-8.
std::string encode_command(const command& x);

/// Encodes the details of a SENT audit event of a bulk send as the
/// reference's send_batch (and our cmdbus_send_commands) writes them:
/// command_type, correlation_id, reply_to (null when unset), msg_id, and
/// batch_id only when set. Throws `std::invalid_argument` when command_type
/// is not valid UTF-8.
std::string encode_sent_details(std::string_view command_type,
                                const std::optional<uuid>& correlation_id,
                                const std::optional<std::string>& reply_to,
                                int64_t msg_id,
                                const std::optional<uuid>& batch_id);

/// Decodes a PGMQ command message. Strict and total: returns the command or
/// throws `decode_error` naming the problem (invalid JSON or UTF-8, not an
/// object, missing/mistyped domain, command_type or command_id, bad UUID,
/// data not an object, nesting too deep, too large). Unknown keys are
/// ignored; a missing `data` decodes as {} and null correlation_id/reply_to
/// as unset (what the reference sends and accepts); so does reply_to "" (the
/// reference replies only when reply_to is non-empty). Duplicate keys: the
/// last one wins (like Python's json and jsonb).
command decode_command(std::string_view text, const decode_limits& limits = {});

/// Encodes a reply (docs/design.md, "Reply format"): SUCCESS carries
/// `result`; FAILED carries `result` {error_code, error_message,
/// error_details} and the same error_code/error_message at top level;
/// CANCELED carries `reason` and no `result`.
/// `error_details` for FAILED comes from `x.result` when it is an object,
/// else {}.
/// Key order: command_id, correlation_id (null when unset), outcome, then
/// SUCCESS: result; FAILED: result {error_code, error_message,
/// error_details}, error_code, error_message (null when unset); CANCELED:
/// reason (null when unset), and result only when not null. Optional fields
/// that the outcome does not carry (reason, error_code, error_message) follow
/// only when set, so that nothing decoded is lost.
/// Throws `std::invalid_argument` when a string field is not valid UTF-8.
std::string encode_reply(const reply& x);

/// Decodes a reply message: accepts `result` or `data` (when `result` is
/// absent or null) for the result and top-level error_code/error_message,
/// falling back to those inside `result` for FAILED. For FAILED, `result` of
/// the returned reply holds the error details (see `reply::result`).
/// Throws `decode_error` like `decode_command` (also for a missing or
/// unknown `outcome`).
reply decode_reply(std::string_view text, const decode_limits& limits = {});

} // namespace cmdbus::wire
