#pragma once

// The queue operations every part of cmdbus shares: creating a queue and
// notifying its listeners. The NOTIFY channel's name is `notify_channel`
// (queue_name.hpp); docs/database.md says where else the rule is written.

#include <string_view>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::db {

/// Returns whether PGMQ knows `queue` (a row in `pgmq.meta`). Validates the
/// name first (`invalid_argument`).
bool queue_exists(connection& conn, std::string_view queue);

/// Creates `queue` unless PGMQ knows it already: an existing queue costs one
/// read of `pgmq.meta`, no DDL and no lock. A missing one is created by
/// `commandbus.cmdbus_create_queue` when the connected role may call it (the
/// schema owner, a role granted the operator or the worker group: the queue's tables then
/// belong to the owner and the groups of `cmdbus grant` may use them), else
/// by `pgmq.create` with the caller's rights. Concurrent creators of one new
/// queue are serialised by PGMQ's own queue lock. Validates the name before
/// any SQL (`invalid_argument`); PGMQ's notices are dropped. A role that may
/// not create queues (a reader) gets a `db::error` (SQLSTATE 42501)
/// that names the queue and the operator's command that creates it. Inside
/// a transaction, the queue exists once that commits.
void create_queue(connection& conn, std::string_view queue);

/// The statement that notifies `queue`'s listeners (`pg_notify` on
/// `notify_channel(queue)`, no payload), for callers that send it in a
/// pipeline; `notify` runs it.
connection::statement notify_statement(std::string_view queue);

/// Notifies `queue`'s listeners: at commit inside a transaction, at once
/// outside one. Validates the name first (`invalid_argument`).
void notify(connection& conn, std::string_view queue);

} // namespace cmdbus::db
