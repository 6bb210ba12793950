#pragma once

// The queue operations every part of cmdbus shares: creating a queue and
// notifying its listeners. The NOTIFY channel's name is `notify_channel`
// (queue_name.hpp); docs/database.md says where else the rule is written.

#include <optional>
#include <string>
#include <string_view>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::db {

/// Returns whether PGMQ knows `queue` (a row in `pgmq.meta`). Validates the
/// name first (`invalid_argument`).
bool queue_exists(connection& conn, std::string_view queue);

/// Creates `queue` unless PGMQ knows it already: an existing queue costs one
/// read of `pgmq.meta`, no DDL and no lock. A missing one is created by
/// `commandbus.cmdbus_create_queue` when the connected role may call it (the
/// schema owner, a role granted the operator or the worker group: the queue's
/// tables then belong to the owner and the groups of `cmdbus grant` may use
/// them), else by `pgmq.create` with the caller's rights. Concurrent creators
/// of one new queue are serialised by PGMQ's own queue lock. Validates the name
/// before any SQL (`invalid_argument`); PGMQ's notices are dropped. A role that
/// may not create queues (a reader) gets a `db::error` (SQLSTATE 42501) that
/// names the queue and the operator's command that creates it. Inside a
/// transaction, the queue exists once that commits.
void create_queue(connection& conn, std::string_view queue);

/// How a partitioned queue is cut (docs/operations.md, "Partitioned
/// queues"). Both values are PGMQ's: a whole number counts message ids, any
/// other text is an interval of time (PostgreSQL's syntax, e.g. "1 day");
/// the retention must be of the same kind as the interval.
struct partition_spec {
  /// Message ids per partition (partitions by msg_id), or the time each
  /// partition covers (the queue by enqueued_at, the archive by
  /// archived_at). PGMQ's default.
  std::string interval = "10000";
  /// How far back partitions are kept: partitions entirely below the
  /// highest id handed out minus this many ids, or older than this, are
  /// dropped by the maintenance unless they hold a message still needed.
  /// Unset: every partition is kept. PGMQ's default.
  std::optional<std::string> retention = std::string{"100000"};
};

/// What `create_partitioned_queue` says when pg_partman is not installed
/// in database `database`: what to install and run.
std::string partman_missing_message(std::string_view queue,
                                    std::string_view database);

/// Creates `queue` as a partitioned queue (its table and archive
/// partitioned by pg_partman, `spec`) unless it exists; returns whether it
/// created it. A partitioned queue that exists is left as it is (its spec
/// is not compared). Checked before anything is created, each a
/// `db::error` with SQLSTATE 55000 and nothing created: the pg_partman
/// extension missing from the database (partman_missing_message), a queue
/// of that name that is not partitioned. An invalid name, interval or
/// retention is an `invalid_argument`. The creation is one statement
/// (`commandbus.cmdbus_create_partitioned_queue`, as the schema's owner):
/// a failure leaves no table, partition or configuration behind. A role
/// that may not call it gets a `db::error` (SQLSTATE 42501) that says so.
bool create_partitioned_queue(connection& conn, std::string_view queue,
                              const partition_spec& spec);

/// The statement that notifies `queue`'s listeners (`pg_notify` on
/// `notify_channel(queue)`, no payload), for callers that send it in a
/// pipeline; `notify` runs it.
connection::statement notify_statement(std::string_view queue);

/// Notifies `queue`'s listeners: at commit inside a transaction, at once
/// outside one. Validates the name first (`invalid_argument`).
void notify(connection& conn, std::string_view queue);

} // namespace cmdbus::db
