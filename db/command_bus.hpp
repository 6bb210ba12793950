#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/prepared_command.hpp"
#include "cmdbus/db/send_combiner.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus {

/// Settings of a `command_bus`.
struct command_bus_options {
  /// max_attempts for commands that do not set one (or set 0).
  int default_max_attempts = 3;
  /// Commands per transaction in `send_batch` (and most commands combined
  /// into one transaction by concurrent `send` calls).
  size_t chunk_size = 1000;
  /// Chunks of one `send_batch` call sent concurrently on separate pooled
  /// connections, each connection taking the next chunk as soon as its
  /// previous one committed (and encoding it on its own thread). 1 (the
  /// default) sends them one after the other, so that a failure leaves
  /// exactly the chunks before it committed; with more, chunks running
  /// beside the failing one may have committed too, and no chunk starts
  /// after a failure. For throughput, about one more than the database
  /// server's cores keeps them busy (see bench/send_bench.cpp).
  size_t parallel_chunks = 1;
  /// Transactions that concurrent `send` calls may have in flight at once
  /// (each on its own pooled connection); calls arriving meanwhile are
  /// combined into the next transaction. Beyond the first, a transaction
  /// starts only for two or more waiting calls. Two keep a second server
  /// core busy while one transaction commits (bench/send_bench.cpp: four
  /// sending threads 0.69x -> about 0.9x of raw pgmq.send); more make the
  /// transactions' NOTIFY commits, which PostgreSQL serialises, wait on
  /// each other.
  size_t max_concurrent_sends = 2;
  /// Chunks of at least this many commands are written with COPY instead
  /// of one INSERT ... SELECT per table (the same rows): five round trips
  /// instead of one, and about a fifth less server time per command, which
  /// pays off from about 60 commands on (bench/send_bench.cpp).
  size_t copy_threshold = 100;
};

/// Filters of `query_commands`; unset filters match everything. Date bounds
/// are inclusive. Results are ordered by created_at descending.
struct command_query {
  std::optional<command_status> status;
  std::optional<std::string> domain;
  std::optional<std::string> command_type;
  std::optional<timestamp> created_after;
  std::optional<timestamp> created_before;
  /// Commands of this batch only.
  std::optional<uuid> batch_id;
  int limit = 100;
  int offset = 0;
};

/// A delayed command that is not due yet: PENDING, its message never read
/// and invisible until its not-before time (docs/scheduling.md, "Delayed
/// commands"). A retry waiting for its backoff is not one (its message was
/// read before).
struct scheduled_command {
  command_metadata command;
  /// When its message becomes visible (its not-before time).
  timestamp due_at{};
};

/// What `wait_for_final` and `send_and_wait` return.
struct command_wait_result {
  /// The command as last read; unset when it does not exist.
  std::optional<command_metadata> command;
  /// Its status is final (COMPLETED, FAILED, CANCELED or
  /// IN_TROUBLESHOOTING_QUEUE; see `is_final`); false when the budget
  /// passed (or `stop` said so) while it was PENDING or IN_PROGRESS.
  bool final = false;
  /// `send_and_wait` only: what the send returned.
  send_result sent;
};

/// Whether a command in status `s` is done with: terminal, or in the
/// troubleshooting queue (where only an operator moves it on).
bool is_final(command_status s) noexcept;

/// Options of `create_batch`.
struct create_batch_options {
  /// Generated when unset.
  std::optional<uuid> batch_id;
  std::optional<std::string> name;
  std::optional<json> custom_data;
};

/// The send side of the command bus (the reference library's CommandBus):
/// sends commands to `{domain}__commands` and reads their metadata, audit
/// trail and batches. A send writes the message, the command row and its
/// SENT audit in one transaction.
///
/// Thread-safe: each call takes a connection from the pool. Every write also
/// has an overload that runs on the caller's connection, inside whatever
/// transaction the caller has open (the outbox pattern: the business write
/// and the command commit or roll back together).
///
/// Queues are created on demand (`pgmq.create` is idempotent): the domain's
/// command queue and the `reply_to` queue, once per bus instance, on a
/// pooled connection outside the caller's transaction; queue names are
/// validated before any SQL.
class command_bus {
public:
  explicit command_bus(db::pool& pool, command_bus_options opts = {});

  /// Sends one command and returns once it is committed. Concurrent calls
  /// from several threads may share a transaction (client-side group
  /// commit); each caller still gets exactly its own outcome. Throws
  /// `duplicate_command_error` when (domain, command_id) exists (also when
  /// a concurrent send wins the race), `batch_not_found_error` for an
  /// unknown `batch_id`, `db::invalid_argument` for an invalid domain or
  /// reply_to, `db::error` for database failures.
  send_result send(const send_request& req);

  /// Sends one command on `conn` within the caller's transaction.
  send_result send(const send_request& req, db::connection& conn);

  /// Sends many commands: chunks of `chunk_size`, one transaction per
  /// chunk, grouped by domain inside a chunk, one NOTIFY per queue per
  /// chunk. A duplicate (in the input or in the database) raises
  /// `duplicate_command_error`; chunks committed before stay committed.
  batch_send_result send_batch(const std::vector<send_request>& reqs);

  /// Sends many commands on `conn` within the caller's transaction (all
  /// chunks in it).
  batch_send_result send_batch(const std::vector<send_request>& reqs,
                               db::connection& conn);

  /// Creates a batch atomically: the batch row (PENDING, total_count),
  /// all messages, command rows and SENT audits in one transaction. Throws
  /// `command_bus_error` for an empty list, `invalid_operation_error` (a
  /// `command_bus_error`) for a batch id that exists in the domain already
  /// (batches are created whole: nothing is ever added to one),
  /// `duplicate_command_error` for a duplicate command.
  create_batch_result create_batch(const std::string& domain,
                                   const std::vector<batch_command>& commands,
                                   const create_batch_options& opts = {});

  /// Creates a batch on `conn` within the caller's transaction.
  create_batch_result create_batch(const std::string& domain,
                                   const std::vector<batch_command>& commands,
                                   const create_batch_options& opts,
                                   db::connection& conn);

  /// Returns the command's metadata, if it exists.
  std::optional<command_metadata> get_command(const std::string& domain,
                                              const uuid& command_id);

  /// Waits until the command's status is final (`is_final`), at most
  /// `budget`, and returns it as last read. Polls the command row with a
  /// growing delay (10 ms, then half as long again each time, at most
  /// 500 ms), each poll on a pooled connection that it returns at once:
  /// a waiter holds no connection while it sleeps. `stop`, when given, is
  /// asked before each sleep: true ends the wait early (e.g. the client
  /// that asked went away). Returns at once, with `command` unset, for an
  /// unknown command; throws `db::error` when the database fails.
  command_wait_result wait_for_final(const std::string& domain,
                                     const uuid& command_id,
                                     std::chrono::milliseconds budget,
                                     const std::function<bool()>& stop = {});

  /// Sends `req` (as `send`, with the same errors) and then waits for its
  /// final status within `budget` (as `wait_for_final`).
  command_wait_result send_and_wait(const send_request& req,
                                    std::chrono::milliseconds budget);

  /// Returns whether the command exists.
  bool command_exists(const std::string& domain, const uuid& command_id);

  /// Returns the commands matching `q`.
  std::vector<command_metadata> query_commands(const command_query& q);

  /// Returns the scheduled commands of `q.domain` (required: throws
  /// `command_bus_error` without it) that match the type, batch and
  /// created_* filters of `q`, earliest due first, `q.limit` of them from
  /// `q.offset`. A status filter other than PENDING matches nothing.
  /// Throws `db::invalid_argument` for an invalid domain.
  std::vector<scheduled_command> query_scheduled(const command_query& q);

  /// Returns when the command is due if it is scheduled (see
  /// `scheduled_command`), else nullopt (unknown, due, running, waiting for
  /// a retry, finished).
  std::optional<timestamp> scheduled_due_at(const std::string& domain,
                                            const uuid& command_id);

  /// Returns the audit trail of a command ordered by (ts, audit_id), so that
  /// events with the same timestamp keep the order they were written in;
  /// empty when unknown.
  std::vector<audit_event>
  get_audit_trail(const uuid& command_id,
                  const std::optional<std::string>& domain = std::nullopt);

  /// Returns the batch, if it exists.
  std::optional<batch_metadata> get_batch(const std::string& domain,
                                          const uuid& batch_id);

  /// Returns the domain's batches, newest first.
  std::vector<batch_metadata>
  list_batches(const std::string& domain,
               std::optional<batch_status> status = std::nullopt,
               int limit = 100, int offset = 0);

  /// Repairs a batch's counters (the repair path, for counters that went
  /// wrong, e.g. after rows were changed by hand) and returns the batch as
  /// it is afterwards; nullopt when it does not exist. Calls
  /// `commandbus.sp_refresh_batch_stats`, which, under a lock of the batch
  /// row, recounts completed, failed, canceled and in_troubleshooting from
  /// the command rows (for a PROCESS batch: from its processes) and
  /// overwrites the four counters with those counts. Commands in the
  /// troubleshooting queue count as finished for it: once completed +
  /// failed + canceled + in_troubleshooting >= total_count the status
  /// becomes COMPLETED_WITH_FAILURES when any of the last three is > 0,
  /// else COMPLETED, and completed_at is set if it was not. Otherwise a
  /// PENDING batch with anything counted becomes IN_PROGRESS and any other
  /// status is kept (a finished batch is never reopened); started_at is set
  /// once anything is counted. Writes no audit event; a batch that the
  /// repair finishes has its completion recorded for delivery, so that a
  /// worker with batch callbacks for the domain runs them. Note that the
  /// recount matches command rows by batch_id alone, not by domain.
  std::optional<batch_metadata> refresh_batch(const std::string& domain,
                                              const uuid& batch_id);

  /// Returns the commands of a batch, oldest first.
  std::vector<command_metadata>
  list_batch_commands(const std::string& domain, const uuid& batch_id,
                      std::optional<command_status> status = std::nullopt,
                      int limit = 100, int offset = 0);

  /// Creates `queue` (validated) unless this bus created it already.
  void ensure_queue(const std::string& queue);

private:
  db::prepared_command prepare(const send_request& req) const;
  void ensure_queues(const std::vector<db::prepared_command>& items);
  std::vector<std::pair<size_t, size_t>>
  plan_chunks(const std::vector<send_request>& reqs);
  std::vector<db::prepared_command>
  prepare_range(const std::vector<send_request>& reqs,
                std::pair<size_t, size_t> range) const;
  // Looks on `conn`, or on a pooled connection when null.
  std::optional<uuid> first_existing(const std::string& domain,
                                     const std::vector<uuid>& ids,
                                     db::connection* conn = nullptr);
  std::vector<send_result>
  send_chunk(const std::vector<db::prepared_command>& items,
             db::connection& conn, bool own_transaction);
  void send_together(const db::send_combiner::group& group);

  db::pool& pool_;
  command_bus_options opts_;
  std::mutex queues_mtx_;
  std::set<std::string> queues_;
  db::send_combiner combiner_;
};

} // namespace cmdbus
