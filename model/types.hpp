#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus {

/// Wall-clock time with microsecond precision (PostgreSQL timestamptz).
using timestamp = std::chrono::time_point<std::chrono::system_clock,
                                          std::chrono::microseconds>;

/// Parses PostgreSQL's timestamptz output in ISO style for any time zone
/// offset ("2026-11-26 00:23:12.123456+00", "...+05:30") and ISO 8601 with
/// 'T' and 'Z'. Returns `std::nullopt` for anything else.
std::optional<timestamp> parse_timestamp(std::string_view text) noexcept;

/// Formats as ISO 8601 UTC with microseconds: "2026-11-26T00:23:12.123456Z".
std::string format_timestamp(timestamp t);

// -- enumerations (stored strings as the reference stores them) ---------------

/// Status of a command row.
enum class command_status {
  pending,
  in_progress,
  completed,
  failed,
  canceled,
  in_troubleshooting_queue,
};

/// Returns the stored string, e.g. "IN_TROUBLESHOOTING_QUEUE".
std::string_view to_string(command_status x) noexcept;

/// Parses a stored string (exact, upper case).
std::optional<command_status> parse_command_status(std::string_view x) noexcept;

/// Returns whether no further processing happens in this status (COMPLETED,
/// FAILED, CANCELED).
bool is_terminal(command_status x) noexcept;

/// Outcome carried by a reply message.
enum class reply_outcome { success, failed, canceled };

std::string_view to_string(reply_outcome x) noexcept;
std::optional<reply_outcome> parse_reply_outcome(std::string_view x) noexcept;

/// Status of a batch row.
enum class batch_status {
  pending,
  in_progress,
  completed,
  completed_with_failures
};

std::string_view to_string(batch_status x) noexcept;
std::optional<batch_status> parse_batch_status(std::string_view x) noexcept;

// -- records ------------------------------------------------------------------

/// A command as handlers see it (decoded from the PGMQ message).
struct command {
  std::string domain;
  std::string command_type;
  uuid command_id;
  /// The caller's payload; an object.
  json data = json::object();
  std::optional<uuid> correlation_id;
  std::optional<std::string> reply_to;
  /// Higher runs first among a domain's due commands when its worker reads
  /// by priority (docs/scheduling.md, "Priorities"); the message member
  /// "priority", absent when unset (the message is then exactly what it is
  /// without priorities). Decoded leniently: a member that is not an
  /// integer in int's range counts as unset.
  std::optional<int> priority;
};

/// Field-wise equality; payloads compare by their compact text.
bool operator==(const command& a, const command& b) noexcept;
bool operator!=(const command& a, const command& b) noexcept;

/// A row of commandbus.command.
struct command_metadata {
  std::string domain;
  uuid command_id;
  std::string command_type;
  command_status status = command_status::pending;
  int attempts = 0;
  int max_attempts = 3;
  std::optional<int64_t> msg_id;
  std::optional<uuid> correlation_id;
  /// `std::nullopt` when the stored reply_queue is '' (no reply_to).
  std::optional<std::string> reply_to;
  std::optional<std::string> last_error_type;
  std::optional<std::string> last_error_code;
  std::optional<std::string> last_error_msg;
  timestamp created_at{};
  timestamp updated_at{};
  std::optional<uuid> batch_id;
};

/// A reply message (see docs/design.md, "Reply format").
struct reply {
  uuid command_id;
  std::optional<uuid> correlation_id;
  reply_outcome outcome = reply_outcome::success;
  /// SUCCESS and CANCELED: `result` (or its alias `data`) of the message;
  /// null when absent. FAILED: the error details, always an object: the
  /// message's `result.error_details`, or the whole `result`/`data` object
  /// when it has no such key, else {}. Encoding writes it back as
  /// `result.error_details`, so decoding and encoding are inverses.
  json result = json::null();
  std::optional<std::string> error_code;
  std::optional<std::string> error_message;
  /// Operator cancel only.
  std::optional<std::string> reason;
};

/// Field-wise equality; payloads compare by their compact text.
bool operator==(const reply& a, const reply& b) noexcept;
bool operator!=(const reply& a, const reply& b) noexcept;

/// A row of commandbus.batch.
struct batch_metadata {
  std::string domain;
  uuid batch_id;
  std::optional<std::string> name;
  std::optional<json> custom_data;
  batch_status status = batch_status::pending;
  /// "COMMAND" or "PROCESS".
  std::string batch_type = "COMMAND";
  int total_count = 0;
  int completed_count = 0;
  int failed_count = 0;
  int canceled_count = 0;
  int in_troubleshooting_count = 0;
  timestamp created_at{};
  std::optional<timestamp> started_at;
  std::optional<timestamp> completed_at;
};

/// A row of commandbus.audit.
struct audit_event {
  int64_t audit_id = 0;
  std::string domain;
  uuid command_id;
  std::string event_type;
  timestamp ts{};
  std::optional<json> details;
};

/// A command in the troubleshooting queue with its archived message.
struct troubleshooting_item {
  std::string domain;
  uuid command_id;
  std::string command_type;
  /// IN_TROUBLESHOOTING_QUEUE in a listing; whatever it is now for a
  /// command looked up by id.
  command_status status = command_status::in_troubleshooting_queue;
  int attempts = 0;
  int max_attempts = 0;
  std::optional<std::string> last_error_type;
  std::optional<std::string> last_error_code;
  std::optional<std::string> last_error_msg;
  std::optional<uuid> correlation_id;
  std::optional<std::string> reply_to;
  std::optional<uuid> batch_id;
  /// The latest archived PGMQ message of the command (the original
  /// command message); unset when the archive has none.
  std::optional<json> payload;
  timestamp created_at{};
  timestamp updated_at{};
};

/// One command to send.
struct send_request {
  std::string domain;
  std::string command_type;
  uuid command_id;
  json data = json::object();
  std::optional<uuid> correlation_id;
  std::optional<std::string> reply_to;
  /// Falls back to the bus default when unset or 0.
  std::optional<int> max_attempts;
  /// The batch this command belongs to (checked to exist).
  std::optional<uuid> batch_id;
  /// Not before this time (UTC): the command is PENDING at once, but its
  /// message stays invisible to every worker until then (PGMQ's send
  /// delay; docs/scheduling.md, "Delayed commands"). Unset, or a time that
  /// is not later than the database server's clock at the send: now. Use
  /// `not_before_in` for a delay.
  std::optional<timestamp> not_before;
  /// The command's priority (command::priority); unset: none, and the
  /// message is byte for byte what it is without priorities.
  std::optional<int> priority;
};

/// The not-before time `delay` from now by this machine's clock (for
/// `send_request::not_before` and `batch_command::not_before`).
timestamp not_before_in(std::chrono::microseconds delay);

/// What `send` returns.
struct send_result {
  uuid command_id;
  int64_t msg_id = 0;
};

/// What `send_batch` returns.
struct batch_send_result {
  std::vector<send_result> results;
  int chunks_processed = 0;
  int total_commands = 0;
};

/// One command of a batch created with `create_batch` (the batch supplies
/// the domain).
struct batch_command {
  std::string command_type;
  uuid command_id;
  json data = json::object();
  std::optional<uuid> correlation_id;
  std::optional<std::string> reply_to;
  std::optional<int> max_attempts;
  /// As `send_request::not_before`: each command of a batch may have its
  /// own.
  std::optional<timestamp> not_before;
  /// The command's priority (send_request::priority).
  std::optional<int> priority;
};

/// What `create_batch` returns.
struct create_batch_result {
  uuid batch_id;
  std::vector<send_result> command_results;
  int total_commands = 0;
};

/// Retry policy (the reference's RetryPolicy): exhaustion when
/// attempt >= max_attempts; backoff from the schedule, clamped to its last
/// entry.
struct retry_policy {
  int max_attempts = 3;
  std::vector<int> backoff_schedule{10, 60, 300};

  /// Returns whether another attempt follows `attempt` (1-based).
  bool should_retry(int attempt) const noexcept {
    return attempt < max_attempts;
  }

  /// Returns the delay in seconds after failed attempt `attempt` (1-based):
  /// 0 when exhausted, schedule[0] for attempt <= 0, 30 with an empty schedule.
  int backoff(int attempt) const noexcept;
};

} // namespace cmdbus
