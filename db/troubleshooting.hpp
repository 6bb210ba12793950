#pragma once

// The troubleshooting queue (TSQ): the operator's view of the commands with
// status IN_TROUBLESHOOTING_QUEUE and the three ways out of it (retry,
// cancel, complete), wire-compatible with the reference Python library's
// TroubleshootingQueue. See docs/tsq.md.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus {

/// An operator action on a command that is no longer in the troubleshooting
/// queue (another operator or a worker got there first). Exit code 2 in the
/// CLI, like any invalid operation.
class not_in_tsq_error : public invalid_operation_error {
public:
  not_in_tsq_error(const uuid& command_id, command_status status)
    : invalid_operation_error("command " + command_id.to_string()
                              + " is not in the troubleshooting queue (status "
                              + std::string{to_string(status)} + ")"),
      status_(status) {
    // nop
  }
  command_status status() const noexcept {
    return status_;
  }

private:
  command_status status_;
};

/// An operator cancel of a command that has started, or is being read by a
/// worker right now: only a PENDING command whose message was never read
/// (a delayed command not due yet, or one still waiting in the backlog) can
/// be canceled before it runs. Exit code 2 in the CLI.
class not_pending_error : public invalid_operation_error {
public:
  not_pending_error(const uuid& command_id, command_status status)
    : invalid_operation_error(
      "command " + command_id.to_string()
      + " cannot be canceled before it runs: it is "
      + (status == command_status::pending
           ? std::string{"being read by a worker, or was read before"}
           : "in status " + std::string{to_string(status)})),
      status_(status) {
    // nop
  }
  command_status status() const noexcept {
    return status_;
  }

private:
  command_status status_;
};

/// Which commands of the TSQ a listing, count or bulk operation covers.
/// Unset filters match everything.
struct tsq_filter {
  /// Required.
  std::string domain;
  std::optional<std::string> command_type;
  /// Matches last_error_code.
  std::optional<std::string> error_code;
  std::optional<uuid> batch_id;
  /// Only commands whose updated_at (the move to the TSQ) lies further back.
  std::optional<std::chrono::milliseconds> older_than;
  /// Order by updated_at ascending instead of descending (newest first).
  bool oldest_first = false;
  /// Rows to return (negative: no limit) and to skip; `count` ignores both.
  int limit = 50;
  int offset = 0;
};

/// One error of a command's history in the audit trail: a FAILED event (a
/// transient failure that was retried) or the MOVED_TO_TSQ event.
struct tsq_error_event {
  std::string event_type;
  timestamp ts{};
  std::optional<int> attempt;
  /// MOVED_TO_TSQ: "EXHAUSTED" when the attempts ran out; absent for a
  /// permanent failure.
  std::optional<std::string> reason;
  std::optional<std::string> error_type;
  std::optional<std::string> error_code;
  std::optional<std::string> error_msg;
};

/// A command with its archived message and its error history.
struct tsq_details {
  troubleshooting_item item;
  std::vector<tsq_error_event> errors;
};

/// What an operator cancel or complete did to the command's batch.
struct tsq_result {
  std::optional<uuid> batch_id;
  /// The batch became complete with this operation (its BATCH_COMPLETED
  /// audit was written and its callback delivery recorded).
  bool batch_completed = false;
};

/// What a bulk (or multi-id) operation does to each command.
struct tsq_operation {
  enum class kind { retry, cancel, complete };
  kind action = kind::retry;
  /// cancel: the reason in the CANCELED reply and the audit.
  std::optional<std::string> reason;
  /// complete: the result in the SUCCESS reply (null when unset).
  std::optional<json> result;
  /// Recorded in the audit; null when unset.
  std::optional<std::string> operator_name;
};

/// Returns "retry", "cancel" or "complete".
const char* to_string(tsq_operation::kind x) noexcept;

/// The outcome of one command of a bulk operation.
struct tsq_item_outcome {
  enum class kind {
    done,
    /// No such command (skipped).
    not_found,
    /// It left the TSQ before its turn (skipped).
    not_in_tsq,
    /// Anything else (e.g. no archived message to retry).
    failed,
  };
  uuid command_id;
  kind outcome = kind::done;
  /// The error for anything but `done`.
  std::string message;
  /// retry: the new message.
  std::optional<int64_t> new_msg_id;
  tsq_result batch;
};

/// Counts of a bulk operation: of the `matched` ids, `done` were changed,
/// `skipped` were no longer in the TSQ (so a re-run after an interruption
/// counts the ones done before as skipped), `not_found` do not exist, and
/// `failed` failed otherwise.
struct tsq_bulk_result {
  int matched = 0;
  int done = 0;
  int skipped = 0;
  int not_found = 0;
  int failed = 0;
};

/// The troubleshooting queue of every domain in the database.
///
/// Each operation runs in one transaction that first locks the command row
/// (`SELECT ... FOR UPDATE`) and checks its status there, so that of two
/// operators acting on one command exactly one succeeds and the other gets
/// `not_in_tsq_error`. Thread-safe: each call takes a pooled connection.
class troubleshooting_queue {
public:
  explicit troubleshooting_queue(db::pool& pool);

  /// Returns the matching TSQ commands with their archived message (the
  /// latest archive row of each), newest first unless `oldest_first`.
  /// Throws `db::invalid_argument` for an invalid domain.
  std::vector<troubleshooting_item> list(const tsq_filter& f);

  /// Returns how many TSQ commands match `f` (limit and offset ignored).
  int64_t count(const tsq_filter& f);

  /// Returns the ids of the matching TSQ commands in list order.
  std::vector<uuid> ids(const tsq_filter& f);

  /// Returns the command (in whatever status it is now) with its archived
  /// message and the errors of its audit trail in order. Throws
  /// `command_not_found_error`.
  tsq_details get(const std::string& domain, const uuid& command_id);

  /// Re-sends the command's latest archived message to `{domain}__commands`
  /// and makes it PENDING again with 0 attempts (audit OPERATOR_RETRY; the
  /// batch's troubleshooting counter goes down). Returns the new msg_id.
  /// Throws `command_not_found_error`, `not_in_tsq_error`, and
  /// `invalid_operation_error` when no archived message exists.
  int64_t retry(const std::string& domain, const uuid& command_id,
                const std::optional<std::string>& operator_name = std::nullopt);

  /// Makes the command CANCELED, sends a CANCELED reply with `reason` to
  /// its reply_to (if any) and records OPERATOR_CANCEL. Throws like retry.
  tsq_result
  cancel(const std::string& domain, const uuid& command_id,
         const std::optional<std::string>& reason,
         const std::optional<std::string>& operator_name = std::nullopt);

  /// Cancels a command before it runs: one that is PENDING and whose
  /// message no worker has read (a delayed command that is not due yet, or
  /// one still waiting in the backlog). Its message is archived (so no
  /// worker, ours or the reference's, ever reads it, and its payload stays
  /// for `show`), and the rest is what `cancel` writes: status CANCELED, a
  /// CANCELED reply with `reason` to its reply_to (if any), the
  /// OPERATOR_CANCEL audit, and the batch counted (canceled + 1; it may
  /// complete the batch). Throws `command_not_found_error`, and
  /// `not_pending_error` when it has started or a worker is reading it at
  /// this moment (it is then left alone).
  tsq_result cancel_pending(const std::string& domain, const uuid& command_id,
                            const std::optional<std::string>& reason,
                            const std::optional<std::string>& operator_name
                            = std::nullopt);

  /// Makes the command COMPLETED, sends a SUCCESS reply with `result` (null
  /// when unset) to its reply_to (if any) and records OPERATOR_COMPLETE.
  /// Throws like retry.
  tsq_result
  complete(const std::string& domain, const uuid& command_id,
           const std::optional<json>& result,
           const std::optional<std::string>& operator_name = std::nullopt);

  /// Applies `op` to each of `ids`, each in its own transaction, in order.
  /// Commands that are unknown or not in the TSQ (any more) are skipped,
  /// other failures counted; `on_each` (if set) sees every outcome.
  /// Connection failures propagate: what committed stays committed and a
  /// re-run skips it.
  tsq_bulk_result
  apply(const std::string& domain, const std::vector<uuid>& ids,
        const tsq_operation& op,
        const std::function<void(const tsq_item_outcome&)>& on_each = {});

  /// Applies `op` to the commands matching `f` (taken once, up front).
  tsq_bulk_result
  apply(const tsq_filter& f, const tsq_operation& op,
        const std::function<void(const tsq_item_outcome&)>& on_each = {});

private:
  db::pool& pool_;
};

} // namespace cmdbus
