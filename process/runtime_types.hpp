#pragma once

// What the process manager's actors exchange (actors/interfaces.hpp says
// who sends what): a reply read from a process reply queue, and what
// became of it. Plain data.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "cmdbus/process/status.hpp"

namespace cmdbus {

/// A reply message read from a domain's process reply queue.
struct process_reply_message {
  int64_t msg_id = 0;
  /// How often the message has been read (1 on the first read).
  int read_ct = 0;
  /// The reply's correlation id: the process it belongs to.
  uuid process_id;
  reply r;
};

/// What became of a reply.
enum class apply_kind {
  /// The process moved on; the message is deleted.
  applied,
  /// Nothing changed (a duplicate, a late reply, a terminal process: see
  /// the note); the message is deleted.
  ignored,
  /// The message was archived: it can never apply (no such process), or it
  /// failed too often (see process_settings::max_reads).
  archived,
  /// It failed this time (its workflow threw, or the process type has no
  /// workflow here, which the router's read rules out); the message
  /// reappears after its visibility timeout.
  left,
  /// The database is unavailable: try again after `retry_after`.
  retry,
};

/// Returns "applied", "ignored", "archived", "left" or "retry".
const char* to_string(apply_kind k) noexcept;

struct apply_outcome {
  apply_kind kind = apply_kind::applied;
  /// The process's status afterwards (applied and ignored).
  std::optional<process_status> status;
  /// Why (ignored, archived, left, retry), for the log.
  std::string note;
  std::chrono::milliseconds retry_after{0};
};

} // namespace cmdbus
