#pragma once

// The rows of a process manager: commandbus.process and
// commandbus.process_audit, as the reference library reads and writes them.

#include <optional>
#include <string>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "cmdbus/process/status.hpp"

namespace cmdbus {

/// A row of commandbus.process.
struct process_metadata {
  std::string domain;
  uuid process_id;
  std::string process_type;
  process_status status = process_status::pending;
  /// The name of the step whose command is out (or was out last).
  std::optional<std::string> current_step;
  /// The workflow's state as JSON (an object for the reference).
  json state = json::object();
  std::optional<std::string> error_code;
  std::optional<std::string> error_message;
  timestamp created_at{};
  timestamp updated_at{};
  std::optional<timestamp> completed_at;
  std::optional<uuid> batch_id;
};

/// A row of commandbus.process_audit: one command a step sent, and its reply
/// once it arrived.
struct process_audit_entry {
  std::string step_name;
  uuid command_id;
  std::string command_type;
  std::optional<json> command_data;
  timestamp sent_at{};
  std::optional<reply_outcome> outcome;
  std::optional<json> reply_data;
  std::optional<timestamp> received_at;
};

} // namespace cmdbus
