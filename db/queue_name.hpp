#pragma once

#include <string>
#include <string_view>

namespace cmdbus::db {

/// The longest queue name PGMQ accepts.
constexpr size_t max_queue_name_length = 47;

/// Suffix of a domain's command queue (`{domain}__commands`).
constexpr std::string_view command_queue_suffix = "__commands";

/// Returns an empty string when `name` is a valid queue name (1 to 47 ASCII
/// letters, digits or underscores: PGMQ's rule), else the reason.
std::string queue_name_problem(std::string_view name);

/// Throws `db::invalid_argument` with a clear message unless `name` is a
/// valid queue name. Called before any SQL that interpolates a queue name.
void validate_queue_name(std::string_view name);

/// Throws `db::invalid_argument` unless `domain` is a valid domain name, i.e.
/// `{domain}__commands` is a valid queue name.
void validate_domain(std::string_view domain);

/// Returns `{domain}__commands` after validating `domain`.
std::string command_queue(std::string_view domain);

/// Returns the NOTIFY channel of `queue`, `pgmq_notify_{queue}` in lower
/// case, after validating `queue`: the reference's channel, which NOTIFY and
/// LISTEN fold to lower case as an unquoted identifier. The one place in C++
/// that writes this rule (docs/database.md, *Queues and notifications*).
std::string notify_channel(std::string_view queue);

/// Returns the name of `queue`'s table in schema pgmq, as PGMQ's
/// format_table_name(queue, 'q') does: `q_{queue}` in lower case. Validates
/// `queue` first, so the result is safe to interpolate as an identifier.
std::string queue_table(std::string_view queue);

/// Returns `name` quoted for error messages, with control and non-ASCII bytes
/// escaped as \xNN so that any input prints safely on one line.
std::string printable(std::string_view name);

} // namespace cmdbus::db
