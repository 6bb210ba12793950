#pragma once

// The pure decision of what a reply does to a process: no I/O, no clock.
// The store (process/store.hpp) reads the process and its audit trail,
// calls `decide` and writes the result in the caller's transaction; the
// runtime logs it.
//
// The rules: the reference's process manager, except
// where it has bugs:
// - a SUCCESS reply to the current step updates the state and sends the
//   next step's command (status WAITING), or completes the process;
// - a FAILED reply to a forward step records its error (top level or inside
//   `result`, see model/wire.hpp) and compensates; the process ends
//   CANCELED (the reference's final status for a failed step);
// - a CANCELED reply (an operator's `tsq cancel`) compensates; the process
//   ends COMPENSATED;
// - compensations run one at a time, in reverse order of the forward steps
//   that succeeded, each waiting for its own reply (status COMPENSATING);
//   the plan is derived from the audit trail every time, so it survives a
//   restart. A compensation answered FAILED or CANCELED ends the process
//   FAILED with that error, for an operator;
// - a reply for a terminal process is recorded in its audit row and changes
//   nothing else; a reply for an unknown command, or a second reply for a
//   command that was answered, changes nothing at all (the reference could
//   flip a COMPENSATED process to COMPLETED).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/process/status.hpp"
#include "cmdbus/process/types.hpp"
#include "cmdbus/process/workflow.hpp"

namespace cmdbus {

/// What a reply did to its process.
enum class reply_disposition {
  /// The process moved on (see the transition's fields).
  applied,
  /// No such process (only the store says this; `decide` gets a process).
  unknown_process,
  /// No audit row of the process has the reply's command_id.
  unknown_command,
  /// The command's audit row has a reply already (a duplicate).
  already_answered,
  /// The process is terminal: the reply is recorded, nothing else changes.
  terminal_process,
  /// The command is not the one the process waits for (an earlier one whose
  /// reply never came): recorded, nothing else changes.
  not_current_command,
};

/// Returns "applied", "unknown_process", "unknown_command", "already_answered",
/// "terminal_process" or "not_current_command".
std::string_view to_string(reply_disposition x) noexcept;

/// A command the process sends next: the step and its command.
struct step_send {
  std::string step;
  step_command command;
};

/// The outcome of `decide`.
struct transition {
  reply_disposition disposition = reply_disposition::applied;

  /// Whether the reply goes into its command's audit row (reply_outcome,
  /// reply_data, received_at): for a known command whose row has no reply
  /// yet, also when nothing else changes.
  bool record_reply = false;
  reply_outcome outcome = reply_outcome::success;
  /// The reply_data to store (see `reply_data_of`).
  std::optional<json> reply_data;

  /// The process after the reply; equal to the process before unless
  /// `changed()`.
  process_status status = process_status::pending;
  std::optional<std::string> current_step;
  json state = json::object();
  std::optional<std::string> error_code;
  std::optional<std::string> error_message;
  /// Whether the process became terminal now (completed_at is set).
  bool completed = false;

  /// The command to send next, if any.
  std::optional<step_send> send;

  /// Returns whether the process row changes.
  bool changed() const noexcept {
    return disposition == reply_disposition::applied;
  }
};

/// Decides what reply `r` does to process `p`, given its audit trail
/// (ordered by sent_at, without the reply) and its workflow. Pure; throws
/// what the workflow's functions throw.
transition decide(const process_metadata& p,
                  const std::vector<process_audit_entry>& trail, const reply& r,
                  const workflow& w);

/// Returns what the reference stores as a reply's reply_data (the message's
/// `result`): the result for SUCCESS and CANCELED (none when null); for
/// FAILED the object {error_code, error_message, error_details} our workers
/// and the reference's send.
std::optional<json> reply_data_of(const reply& r);

/// Returns whether a process in `status` whose current command is in
/// `command` status goes to WAITING_FOR_TSQ: a WAITING process whose
/// command is IN_TROUBLESHOOTING_QUEUE.
bool should_wait_for_tsq(process_status status,
                         command_status command) noexcept;

/// What a status change of a process does to the counters of its PROCESS
/// batch: the counting of the reference's sp_refresh_batch_stats, applied
/// as deltas like the inline counters of command batches.
struct batch_delta {
  /// +1 when the process becomes COMPLETED or COMPENSATED.
  int completed = 0;
  /// +1 when it becomes FAILED or CANCELED.
  int canceled = 0;
  /// +1 when it enters WAITING_FOR_TSQ, -1 when it leaves it.
  int in_troubleshooting = 0;

  bool empty() const noexcept {
    return completed == 0 && canceled == 0 && in_troubleshooting == 0;
  }
};

/// Returns the batch counter changes of a process moving from `from` to
/// `to`.
batch_delta batch_delta_for(process_status from, process_status to) noexcept;

} // namespace cmdbus
