#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus {

/// A command read from its queue and claimed for processing (attempts
/// already incremented, RECEIVED audited).
struct received_command {
  command cmd;
  int64_t msg_id = 0;
  /// 1-based attempt number of this delivery.
  int attempt = 0;
  /// The command's own max_attempts, which decides exhaustion (see
  /// docs/design.md, "Retry exhaustion uses the command's max_attempts").
  int max_attempts = 0;
  std::optional<uuid> batch_id;
  /// The token of the read that claimed it: its outcome is written only
  /// while the database knows this claim (docs/design.md, "Claim tokens").
  /// Nil when it was not claimed through db::worker_store::receive.
  uuid claim;
};

/// How a handler run ended: the reference's exception kinds (transient,
/// permanent, business rule) plus success.
enum class outcome_kind {
  /// The handler returned a result: COMPLETED, SUCCESS reply.
  success,
  /// Retry with backoff, or the troubleshooting queue when exhausted.
  transient,
  /// Straight to the troubleshooting queue.
  permanent,
  /// Terminal FAILED with a FAILED reply.
  business_rule,
};

/// Returns "SUCCESS", "TRANSIENT", "PERMANENT" or "BUSINESS_RULE".
const char* to_string(outcome_kind x) noexcept;

/// The result of one handler run.
struct outcome {
  outcome_kind kind = outcome_kind::success;
  /// The handler's return value (success only).
  json result = json::null();
  std::string error_code;
  std::string error_message;
  /// A JSON object (failures only).
  json error_details = json::object();
};

} // namespace cmdbus
