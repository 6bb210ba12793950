#pragma once

#include <optional>
#include <string_view>

namespace cmdbus {

/// Status of a process (a row of commandbus.process). The stored strings are
/// the reference's (docs/design.md, "Status strings"): in particular
/// `waiting` is stored as "WAITING", not "WAITING_FOR_REPLY".
enum class process_status {
  /// Inserted, first command not sent yet (only inside `start`).
  pending,
  /// Not set by cmdbus; the reference defines it.
  in_progress,
  /// The current step's command is out; waiting for its reply.
  waiting,
  /// The current step's command is in the troubleshooting queue; an
  /// operator's `tsq complete` resumes, `tsq cancel` compensates.
  waiting_for_tsq,
  /// A compensation step's command is out; waiting for its reply.
  compensating,
  /// Terminal: the last step succeeded.
  completed,
  /// Terminal: compensated after an operator canceled a step's command.
  compensated,
  /// Terminal: a compensation failed or was canceled; for an operator.
  failed,
  /// Terminal: compensated after a step failed (the reference's final
  /// status for a failed step).
  canceled,
};

/// Returns the stored string, e.g. "WAITING_FOR_TSQ".
std::string_view to_string(process_status x) noexcept;

/// Parses a stored string (exact, upper case).
std::optional<process_status> parse_process_status(std::string_view x) noexcept;

/// Returns whether nothing happens to a process in this status any more
/// (COMPLETED, COMPENSATED, FAILED, CANCELED).
bool is_terminal(process_status x) noexcept;

} // namespace cmdbus
