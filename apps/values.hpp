#pragma once

// The tool's values on the command line: domains, UUIDs, JSON, statuses and
// durations, each a usage error naming the argument when it does not parse.

#include <chrono>
#include <optional>
#include <string>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::cli {

class args;

/// Returns the command's first positional argument as a domain: usage error
/// when there is none or it is not a valid domain name.
std::string domain_arg(const args& a);

/// Parses a UUID argument; usage error naming `what` otherwise.
uuid parse_uuid_arg(const std::string& what, const std::string& text);

/// Parses a JSON argument: the text itself, `@FILE` for a file's content, or
/// `-` for standard input. Usage error naming `what` for unreadable input or
/// invalid JSON.
json parse_json_arg(const std::string& what, const std::string& text);

/// Like `parse_json_arg`, and the value must be an object.
json parse_object_arg(const std::string& what, const std::string& text);

/// Parses a command status, case-insensitively ("tsq" names
/// IN_TROUBLESHOOTING_QUEUE); usage error listing the choices otherwise.
command_status parse_status_arg(const std::string& what,
                                const std::string& text);

/// Parses a batch status, case-insensitively; usage error otherwise.
batch_status parse_batch_status_arg(const std::string& what,
                                    const std::string& text);

/// Parses a duration: a number with unit ms, s, m, h or d ("90s", "15m",
/// "1.5h"); a bare number is seconds. Usage error naming `what` otherwise.
std::chrono::milliseconds parse_duration(const std::string& what,
                                         const std::string& text);

/// The operator's name for audits: $USER, else $LOGNAME, else the account
/// of the process; nullopt when none is known.
std::optional<std::string> default_operator();

/// Parses a point in time: ISO 8601 with a zone ("2026-12-01T03:00:00Z",
/// "2026-12-01 04:00:00.5+01:00"). Usage error naming `what` otherwise.
timestamp parse_time_arg(const std::string& what, const std::string& text);

/// Returns the not-before time that --delay or --at asks for (see
/// delay_option and at_option), or nullopt when neither was given. Usage
/// error when both were.
std::optional<timestamp> not_before_arg(const args& a);

} // namespace cmdbus::cli
