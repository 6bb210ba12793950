#pragma once

// The process manager's SQL: processes and their audit trails in
// commandbus.process and commandbus.process_audit, written exactly as the
// reference library writes them (so that its PostgresProcessRepository
// reads our processes), and the steps' commands sent with the command bus's
// send path. Every call runs on the caller's connection: inside the
// caller's transaction when one is open (the outbox pattern), else in a
// transaction of its own.

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "cmdbus/process/status.hpp"
#include "cmdbus/process/transition.hpp"
#include "cmdbus/process/types.hpp"
#include "cmdbus/process/workflow.hpp"

namespace cmdbus {

/// Raised by process_store::apply when no workflow is known for the
/// process's type.
class unknown_workflow_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Settings of a `process_store`.
struct process_store_options {
  /// max_attempts of the commands the steps send (the bus's default).
  int default_max_attempts = 3;
};

/// Filters of `process_store::list`; unset filters match everything.
struct process_query {
  /// Any of these statuses (empty: any status).
  std::vector<process_status> statuses;
  std::optional<std::string> process_type;
  /// Newest first (created_at), at most this many.
  int limit = 100;
};

/// A reply to apply (process_store::apply_many) and the process it
/// answers (its correlation id).
struct process_reply {
  uuid process_id;
  reply r;
};

/// Reads and writes processes. Stateless apart from its options; safe to
/// share between threads (each call uses the connection it is given).
///
/// Queues are not created here: the domain's command queue and the reply
/// queue must exist (`command_bus::ensure_queue`; the worker creates its
/// domains' queues). Queue names are validated before any SQL.
class process_store {
public:
  explicit process_store(process_store_options opts = {});

  /// Starts a process of workflow `w` in `domain` with the caller's
  /// `input`: inserts the process row and sends the first step's command
  /// (correlation_id = the process id, reply_to = `reply_queue`, by
  /// convention `{domain}__process_replies`) with its process_audit row;
  /// the process is WAITING at its first step. With `batch_id` the process
  /// belongs to that PROCESS batch (started when it was PENDING). Returns
  /// the process id. Throws what `w` throws for bad input (before any
  /// SQL), `db::invalid_argument` for an invalid domain or reply queue,
  /// `batch_not_found_error` for an unknown batch,
  /// `invalid_operation_error` for a batch that is not a PROCESS batch,
  /// `db::error` otherwise.
  uuid start(db::connection& conn, const workflow& w, const std::string& domain,
             const json& input, const std::string& reply_queue,
             const std::optional<uuid>& batch_id = std::nullopt) const;

  /// Returns the process, if it exists.
  std::optional<process_metadata> get(db::connection& conn,
                                      const std::string& domain,
                                      const uuid& process_id) const;

  /// Returns the processes of `domain` matching `q`, newest first.
  std::vector<process_metadata> list(db::connection& conn,
                                     const std::string& domain,
                                     const process_query& q = {}) const;

  /// Returns the audit trail of a process ordered by sent_at (then by row
  /// id); empty for an unknown process.
  std::vector<process_audit_entry> audit_trail(db::connection& conn,
                                               const std::string& domain,
                                               const uuid& process_id) const;

  /// Applies reply `r` to process `process_id` of workflow `w`: locks the
  /// process row, reads its audit trail, decides (`decide`,
  /// process/transition.hpp) and writes the decision: the reply fields of
  /// the command's audit row, the process row (updated_at, completed_at
  /// when it became terminal), the next command with its audit row, and the
  /// counters of its PROCESS batch. Returns the transition
  /// (`reply_disposition::unknown_process` when there is no such process;
  /// nothing is written then). The runtime deletes the reply message in the
  /// same transaction. When the workflow throws, nothing has been written
  /// yet: the exception propagates (the store's own transaction rolls back;
  /// a caller's transaction still holds the process row's lock until the
  /// caller ends it).
  transition apply(db::connection& conn, const std::string& domain,
                   const uuid& process_id, const reply& r,
                   const workflow& w) const;

  /// Finds the workflow of a process type (null when there is none).
  using workflow_lookup
    = std::function<const workflow*(const std::string& process_type)>;

  /// Like apply(), with the workflow looked up by the locked process's
  /// type (no read before the lock). Throws `unknown_workflow_error` when
  /// `lookup` has none (nothing written).
  transition apply(db::connection& conn, const std::string& domain,
                   const uuid& process_id, const reply& r,
                   const workflow_lookup& lookup) const;

  /// Applies each of `replies` as apply() does, all in one transaction (the
  /// caller's when one is open), with a few set-based statements for the
  /// whole group: the processes locked (in process_id order) and their
  /// trails read in one round trip, every decision made, then every write
  /// in another round trip. Returns a transition per reply, in order. The
  /// processes must be distinct (`invalid_operation_error` otherwise,
  /// before any SQL). When a workflow throws, or `lookup` has none for a
  /// process (`unknown_workflow_error`), nothing of the group has been
  /// written and the exception propagates as in apply().
  std::vector<transition> apply_many(db::connection& conn,
                                     const std::string& domain,
                                     const std::vector<process_reply>& replies,
                                     const workflow_lookup& lookup) const;

  /// Moves the WAITING processes of `domain` whose current step's command
  /// is IN_TROUBLESHOOTING_QUEUE to WAITING_FOR_TSQ (one statement) and
  /// counts them in their batches; returns their ids. With `types`, only
  /// processes of these types (a worker changes only the processes it
  /// drives).
  std::vector<uuid> mark_waiting_for_tsq(
    db::connection& conn, const std::string& domain,
    const std::optional<std::vector<std::string>>& types = std::nullopt) const;

  /// Creates a PROCESS batch (PENDING) for `total_count` processes and
  /// returns its id (`batch_id`, or a generated one); processes join it
  /// with `start(..., batch_id)`. Throws `invalid_operation_error` when the
  /// batch exists in the domain.
  uuid create_batch(db::connection& conn, const std::string& domain,
                    int total_count,
                    const std::optional<std::string>& name = std::nullopt,
                    const std::optional<json>& custom_data = std::nullopt,
                    const std::optional<uuid>& batch_id = std::nullopt) const;

private:
  process_store_options opts_;
};

} // namespace cmdbus
