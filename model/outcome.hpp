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
  /// Read but not claimed yet (docs/worker.md, "Deferred claims"): the
  /// command is still PENDING at `seen_attempts`, and the read's own
  /// fence is the message's `read_ct` and `vt_us` as the read left them.
  /// Its success is claimed and written in one step; anything else is
  /// claimed first (with `claim`).
  bool deferred = false;
  int read_ct = 0;
  /// The message's visibility timeout after the read, in microseconds
  /// since the epoch.
  int64_t vt_us = 0;
  int seen_attempts = 0;
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
