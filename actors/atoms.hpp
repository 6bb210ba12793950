#pragma once

// The atoms of every cmdbus actor (worker, handler node, admin), one per
// meaning, and the process-local message types CAF passes without
// serialization (the handlers' atom, which applications use too, is in
// actors/handler_actor.hpp). actors/interfaces.hpp says who sends which
// message to whom; only actor code and actor tests include this (it pulls
// in CAF headers).

#include <cstdint>
#include <memory>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "cmdbus/actors/handler_actor.hpp"
#include "cmdbus/db/worker_writes.hpp"
#include "cmdbus/model/outcome.hpp"
#include "cmdbus/process/runtime_types.hpp"

namespace cmdbus {

/// A received command shared by the supervisor, the handler running it and
/// the handler's context (which may outlive the handler call).
using command_ptr = std::shared_ptr<const received_command>;

} // namespace cmdbus

namespace cmdbus::atom {

/// Poller, process router: read your queue now (a NOTIFY arrived, a drain
/// continues, or a poll is due).
using wakeup = caf::atom_constant<caf::atom("wakeup")>;
/// Poller: `n` message slots became free again.
using credit = caf::atom_constant<caf::atom("credit")>;
/// Supervisor: commands read by the poller, to run.
using run = caf::atom_constant<caf::atom("run")>;
/// Completion: apply the final side effects of a finished command.
using finish = caf::atom_constant<caf::atom("finish")>;
/// Retry scheduler: reschedule a transient failure.
using retry = caf::atom_constant<caf::atom("retry")>;
/// Retry scheduler: extend the visibility of in-flight messages.
using extend = caf::atom_constant<caf::atom("extend")>;
/// Retry scheduler: claim deferred deliveries whose handler still runs.
using claim = caf::atom_constant<caf::atom("claim")>;
/// Supervisor: return pending credits now (a timer; carries an epoch).
using credit_due = caf::atom_constant<caf::atom("creditdue")>;
/// Supervisor: `n` commands' side effects are committed (or dropped as
/// stale: their delivery no longer holds its message).
using committed = caf::atom_constant<caf::atom("committed")>;
/// The answer to atom::drain: the drain finished.
using done = caf::atom_constant<caf::atom("done")>;
/// Supervisor: a writer could not reach the database, or it did not answer
/// in time; the writer keeps its buffer and retries.
using unavailable = caf::atom_constant<caf::atom("unavail")>;
/// Writers: write the buffered side effects now.
using flush = caf::atom_constant<caf::atom("flush")>;
/// Supervisor: stop intake, finish in-flight work, then reply.
using drain = caf::atom_constant<caf::atom("drain")>;
/// Supervisor: the periodic lease heartbeat and writer watchdog.
using heartbeat = caf::atom_constant<caf::atom("heartbeat")>;
/// Supervisor: a read found the queue empty (tick mode ends on it).
using empty = caf::atom_constant<caf::atom("empty")>;
/// Process router: a process actor has had nothing to do for a while.
using idle = caf::atom_constant<caf::atom("idle")>;
/// Process actor: quit (the router saw it idle, with nothing on the way).
using stop = caf::atom_constant<caf::atom("stop")>;
/// Process actor: try the reply in front again (a timer after a backoff).
using retry_due = caf::atom_constant<caf::atom("retrydue")>;
/// Root: start a domain's supervisor again.
using restart = caf::atom_constant<caf::atom("restart")>;
/// Admin drain: its bound passed without the root's answer (a timer).
using overdue = caf::atom_constant<caf::atom("overdue")>;
/// Supervisor, root, batch counter: batches that just became complete
/// (the completion writer's report travels up to the batch counter).
using batches = caf::atom_constant<caf::atom("batches")>;
/// Look for work left behind in the database: the batch counter for
/// recorded completions whose lease is free, the process router for
/// processes whose step is in the TSQ.
using sweep = caf::atom_constant<caf::atom("sweep")>;
/// Process writer: apply one reply to its process.
using apply = caf::atom_constant<caf::atom("apply")>;

// Between processes (the wire interfaces of actors/interfaces.hpp):

/// Node door: a worker's hello (protocol version, worker name, domain,
/// lease actor).
using hello = caf::atom_constant<caf::atom("hello")>;
/// Supervisor: a remote handler pool is connected (address, offer, pool).
using pool_up = caf::atom_constant<caf::atom("poolup")>;
/// Supervisor: a remote handler pool is gone (address).
using pool_down = caf::atom_constant<caf::atom("pooldown")>;
/// Remote link: connect (again) now (at start, then a timer after a
/// backoff).
using connect = caf::atom_constant<caf::atom("linkconn")>;
/// Admin: the status of a process, as JSON text.
using status = caf::atom_constant<caf::atom("status")>;

} // namespace cmdbus::atom

// Process-local messages: passed between actors of one process without
// serialization. The wire interfaces are checked at compile time never to
// carry them (actors/interfaces.hpp, carries_only_wire_types).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cmdbus::command_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cmdbus::db::finished_command)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cmdbus::db::retry_command)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<cmdbus::received_command>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<cmdbus::uuid>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cmdbus::uuid)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cmdbus::process_reply_message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cmdbus::apply_outcome)
