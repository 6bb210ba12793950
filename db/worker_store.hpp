#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/worker_writes.hpp"
#include "cmdbus/model/outcome.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::db {

/// A message that could not become a command. As in the reference library,
/// such a message never crashes a worker: it is archived or failed, with an
/// audit event.
struct rejected_message {
  int64_t msg_id = 0;
  /// "INVALID" (archived: no usable command_id), "SKIPPED" (archived:
  /// unknown or terminal command) or "UNDECODABLE" (claimed, but the
  /// message does not decode, names another domain than the queue's, or
  /// has a reply_to that is not a queue name; the caller must finish it as
  /// a permanent failure).
  std::string reason;
  std::string detail;
  /// Set for "UNDECODABLE": the claimed command, for finishing it.
  std::optional<received_command> claimed;
};

/// What one `receive` call read.
struct receive_result {
  std::vector<received_command> commands;
  std::vector<rejected_message> rejected;
  /// Messages returned by pgmq.read (commands + rejected).
  int read = 0;
};

/// How a read chooses which visible messages to take (commandbus.cmdbus_read,
/// sql/commandbus/V010__cmdbus_read.sql). The default chooses as pgmq.read
/// does (oldest first) and reads with it.
struct read_options {
  /// At most `second` messages of command type `first` (0: none; no message
  /// of that type is touched). Types not listed are limited by the
  /// quantity only.
  std::vector<std::pair<std::string, int>> type_limits;
  /// Only messages whose msg_id % shard_count == shard_index; shard_count
  /// 0: no shard.
  int shard_index = 0;
  int shard_count = 0;
  /// Highest "priority" first (msg_id order among equals) instead of msg_id
  /// order.
  bool priority = false;
  /// With `priority`: how many of the read are taken oldest-first first
  /// (the starvation bound, docs/scheduling.md).
  int oldest = 0;
  /// Leave the commands that qualify unclaimed (cmdbus_receive_deferred,
  /// docs/worker.md "Deferred claims"); only for a read that does not
  /// choose.
  bool defer_claims = false;

  /// Whether the read needs cmdbus_read (anything but the default).
  bool chooses() const noexcept {
    return !type_limits.empty() || shard_count > 0 || priority;
  }
};

/// What became of one outcome handed to `finish` or `reschedule`.
enum class write_state {
  /// Written by this call.
  written,
  /// Already in the database, written by an earlier attempt of the same
  /// write that committed although its answer was lost: not written again,
  /// and still the delivery's own outcome.
  already_written,
  /// Not written: its delivery no longer holds its message (read again
  /// since, its claim forgotten by the database, or the message gone), or
  /// another outcome of the same command in the call was written.
  stale,
};

/// What one `finish` call wrote.
struct finish_result {
  /// The batches that became complete.
  std::vector<uuid> completed_batches;
  /// The state of each item, in the order given (see state_of).
  std::vector<write_state> states;
  /// The msg_ids of the stale items, in the order given: nothing was
  /// written for them.
  std::vector<int64_t> stale;
};

/// Returns states[i], or write_state::written when `states` does not reach
/// that far (an empty list means every item was written).
inline write_state state_of(const std::vector<write_state>& states,
                            size_t i) noexcept {
  return i < states.size() ? states[i] : write_state::written;
}

/// What one `reschedule` call wrote.
struct reschedule_result {
  /// The state of each item, in the order given (see state_of).
  std::vector<write_state> states;
  /// The msg_ids of the stale items, in the order given.
  std::vector<int64_t> stale;
};

/// The worker's database side for one domain: each call is one set-based
/// statement (or one transaction of them) over a whole batch of commands,
/// using the functions of sql/commandbus/V004__cmdbus_worker.sql with the
/// reference's statuses, audit rows and batch counters, in the forms fenced
/// by the claim of V007__cmdbus_claim_fence.sql.
class worker_store {
public:
  /// Works on `conn` for `domain` (queue `{domain}__commands`).
  worker_store(connection& conn, std::string domain);

  /// Reads up to `qty` visible messages, hiding them for `vt_seconds`, and
  /// claims their commands (attempts + 1, IN_PROGRESS, RECEIVED audit
  /// carrying a new random claim token, which every received_command of the
  /// read holds); invalid messages and those of unknown or terminal
  /// commands are archived and skipped, with an audit event. Claimed
  /// messages that are not a usable command of this domain come back as
  /// "UNDECODABLE" with the reason in `detail`. With `how.chooses()` the
  /// messages are chosen by cmdbus_read (per-type limits, shard, priority);
  /// the commands then come in the order they are to run: highest
  /// priority first with `how.priority`, else msg_id order.
  receive_result receive(int vt_seconds, int qty, const read_options& how = {});

  /// Applies the final side effects of `items` in ONE transaction: success
  /// (delete, COMPLETED, SUCCESS reply), permanent and exhausted failures
  /// (archive, IN_TROUBLESHOOTING_QUEUE), business-rule failures (archive,
  /// FAILED, FAILED reply), with their audit rows and batch counters. Only
  /// deliveries that still own their message are written (V007: the message
  /// is in the queue, the command is IN_PROGRESS at the delivery's attempt,
  /// the database knows the delivery's claim, and no other outcome of the
  /// command in the same call was written); each item's state says what
  /// became of it. Returns the batches that became complete; with
  /// record_batch_completions(true) they are also recorded for durable
  /// callback delivery in the same transaction (V005).
  finish_result finish(const std::vector<finished_command>& items);

  /// Whether `finish` records the batches it completes in
  /// commandbus.cmdbus_batch_delivery (a worker with batch callbacks).
  void record_batch_completions(bool on) noexcept {
    record_batches_ = on;
  }

  /// Claims recorded, undelivered batch completions whose lease is free
  /// (only `batch_ids` when given, else the oldest up to `limit`), leasing
  /// them for `lease_seconds`. With a `claimer` token, rows that token
  /// claimed before are taken again whatever their lease (a claim whose
  /// answer was lost when the connection dropped), and the claimed rows
  /// record it. Returns the claimed batch ids.
  std::vector<uuid>
  claim_batch_deliveries(const std::vector<uuid>* batch_ids, int lease_seconds,
                         int limit,
                         const std::optional<uuid>& claimer = std::nullopt);

  /// Records that the callbacks of `batch_ids` ran. Returns how many rows
  /// changed.
  int mark_batches_delivered(const std::vector<uuid>& batch_ids);

  /// Records transient failures (error fields, FAILED audit) and hides
  /// each message for its backoff, in one statement, for the deliveries
  /// that still own their message (as `finish`; a retry already written is
  /// not written again). Returns each item's state.
  reschedule_result reschedule(const std::vector<retry_command>& items);

  /// Claims deferred deliveries that still own their message (as their
  /// read would have claimed them: attempts, IN_PROGRESS, RECEIVED with
  /// their claim token), in one transaction; the lease heartbeat calls it
  /// for handlers that still run. Returns the msg_ids claimed.
  std::vector<int64_t> claim_deferred(const std::vector<received_command>& xs);

  /// Sets the visibility timeout of in-flight messages to `seconds` from
  /// now, like pgmq.set_vt; with `keep_longer` (the lease heartbeat) a
  /// later visibility timeout already set is kept. Returns how many still
  /// exist.
  int extend_visibility(const std::vector<int64_t>& msg_ids, int seconds,
                        bool keep_longer = false);

  /// Returns the domain's queue name.
  const std::string& queue() const noexcept {
    return queue_;
  }

private:
  /// The statement of a read with `how.chooses()` (cmdbus_receive_read).
  result receive_chosen(int vt_seconds, int qty, const uuid& claim,
                        const read_options& how);
  /// Creates the reply queues that `items` send to and that this store has
  /// not seen yet, before the write, through create_queue (as the schema's
  /// owner where the role may ask for it): inside the write a missing queue
  /// would be created with the connected role's own rights, which a worker
  /// role does not have.
  void ensure_reply_queues(const std::vector<finished_command>& items);

  /// Reply queues known to exist; bounded (cleared when it grows large).
  std::unordered_set<std::string> reply_queues_;

  connection& conn_;
  std::string domain_;
  std::string queue_;
  bool record_batches_ = false;
};

/// Returns the reply message for a finished command (SUCCESS, or FAILED for
/// a business-rule failure, in the reference library's reply format), or
/// std::nullopt when no reply is due: moves to the TSQ send none.
std::optional<std::string> reply_for(const finished_command& x);

} // namespace cmdbus::db
