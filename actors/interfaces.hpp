#pragma once

// Every typed actor handle of cmdbus, with every message it takes, who
// sends it, what it means and what the answer is: the wiring diagram of all
// three roles. Internal timer messages (an actor to itself) come last in
// each interface. Only actor code and actor tests include this.
//
// Worker (actors/worker/, process/):
//
//   root ──────────────── batch_counter
//    ┆ (watched by)         scheduler (recurring schedules of all domains)
//    │                    admin drain (a cmdbus cluster drain under way)
//    │                    job runner (singleton jobs; ended with the root)
//    │ (one per domain)
//   supervisor ─┬─ poller       (reads the queue, woken by LISTEN/NOTIFY)
//               ├─ handler × N  (runs the application's handlers)
//               ├─ remote_link × pools ── lease forwarder
//               │                 (connections to handler nodes)
//               ├─ completion   (final side effects)
//               └─ retry_scheduler (retries, visibility extensions)
//    │ (one per domain with process managers)
//   process router ─┬─ process actor × (processes with replies in flight)
//                   └─ process writer × N (apply replies in transactions)
//
// Handler node (actors/node/), reached by the remote links over the
// network:
//
//   door (published, frozen) ─┬─ node pool × domain ── node handler × N
//                             └─ session × (worker, domain) (versioned)
//
// Operations (actors/ops/): the admin actor (published, frozen), in an
// actor system of its own on workers and nodes.
//
// Parents link their children (actors/worker/runtime.hpp describes the
// worker's lifecycle); actors/worker/spawn.hpp spawns and wires a domain.
//
// What crosses the network: only the interfaces marked "wire" below. Their
// messages are checked at compile time (carries_only_wire_types) to contain
// no process-local type (the ones atoms.hpp declares with
// CAF_ALLOW_UNSAFE_MESSAGE_TYPE: commands as shared pointers, database-layer
// items), so that such a type can never be added to them by mistake. Untyped
// caf::actor appears only where the frozen door must not name a versioned
// interface (the hello's lease and the session it answers); each side casts
// it to its typed handle once, where it arrives.

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "cmdbus/actors/atoms.hpp"
#include "cmdbus/actors/remote_protocol.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus::actors {

/// Whether every message `Handle` takes or answers may cross the network:
/// none of them is a process-local type (one CAF was told to pass unsafely,
/// without serialization: see atoms.hpp).
template <class Handle>
struct carries_only_wire_types;

template <class... Sigs>
struct carries_only_wire_types<caf::typed_actor<Sigs...>> {
  template <class T>
  static constexpr bool wire = !caf::is_allowed_unsafe_message_type<T>::value;

  template <class Sig>
  struct check;

  template <class... In, class... Out>
  struct check<caf::typed_mpi<caf::detail::type_list<In...>,
                              caf::output_tuple<Out...>>> {
    static constexpr bool value = (wire<In> && ...) && (wire<Out> && ...);
  };

  static constexpr bool value = (check<Sigs>::value && ...);
};

} // namespace cmdbus::actors

// -- wire: between a worker and a handler node --------------------------------

namespace cmdbus::remote {

/// WIRE, versioned (remote::protocol_version). The handler pool a node's
/// session offers one worker for one domain.
using handler_pool_actor = caf::typed_actor<
  /// From the worker's supervisor: run this delivery; the answer is its
  /// outcome. A request the node never answers (it died, the connection
  /// dropped) gets no error either: the worker monitors the pool.
  caf::replies_to<atom::handle, wire_command>::with<wire_outcome>>;

/// WIRE, versioned (remote::protocol_version). What a node's handler calls
/// back on the worker for handler_context::extend_visibility: the worker's
/// lease forwarder (actors/worker/remote_link.cpp), which passes nothing
/// but extensions on to the supervisor.
using lease_actor = caf::typed_actor<
  /// Extend the visibility of (msg_ids) to `seconds`, never shortening a
  /// longer one when `keep_longer`; the answer is the number of messages
  /// that still exist.
  caf::replies_to<atom::extend, std::vector<int64_t>, int, bool>::with<int>>;

/// WIRE, frozen: never changes with protocol_version. The door a node
/// publishes.
using node_door_actor = caf::typed_actor<
  /// From a worker's remote link: (hello, its protocol version, its name,
  /// domain, its lease_actor as caf::actor). The answer is the offer and the
  /// session (a handler_pool_actor as caf::actor), or an error:
  /// ec::protocol_mismatch (another version; the node logs it too),
  /// ec::unknown_domain (the node does not serve the domain).
  caf::replies_to<atom::hello, int32_t, std::string, std::string,
                  caf::actor>::with<pool_offer, caf::actor>>;

static_assert(actors::carries_only_wire_types<handler_pool_actor>::value);
static_assert(actors::carries_only_wire_types<lease_actor>::value);
static_assert(actors::carries_only_wire_types<node_door_actor>::value);

} // namespace cmdbus::remote

namespace cmdbus::actors {

// -- partial interfaces (what one kind of sender needs) ----------------------

/// Takes the batches that just became complete, on their way from the
/// completion writer to the batch counter (completion -> supervisor -> root
/// -> batch counter).
using batch_listener_actor = caf::typed_actor<
  /// (domain, batch ids) just became complete; no answer.
  caf::reacts_to<atom::batches, std::string, std::vector<uuid>>>;

/// What the poller sends to its supervisor.
using poller_parent_actor = caf::typed_actor<
  /// From the poller: commands read (each took a credit), to run; no answer.
  caf::reacts_to<atom::run, std::vector<received_command>>,
  /// From the poller: a claimed message that cannot run (undecodable), to
  /// finish as a permanent failure (it took a credit, no handler); no answer.
  caf::reacts_to<atom::finish, db::finished_command>,
  /// From the poller: a read found the queue empty after the poller had
  /// seen `credits_seen` credit messages (tick mode ends on it); no answer.
  caf::reacts_to<atom::empty, int64_t>>;

/// What the two writers (completion, retry scheduler) send to their
/// supervisor.
using writer_parent_actor = caf::typed_actor<
  /// From a writer: the side effects of `n` commands it was handed are
  /// committed (or dropped as stale); no answer.
  caf::reacts_to<atom::committed, int64_t>,
  /// From a writer: a write failed for want of the database; the writer
  /// keeps its buffer and retries (the supervisor's watchdog then knows it
  /// is not stuck); no answer.
  caf::reacts_to<atom::unavailable>>::extend_with<batch_listener_actor>;

// -- application handler actors (public) --------------------------------------

/// An application's own handler actor (registered with add_actor_handler),
/// declared in the public actors/handler_actor.hpp so that applications need
/// no internal header: (handle, received_command) -> outcome.
using cmdbus::command_handler_actor;

// -- the actors of one domain ------------------------------------------------

/// The poller: reads its domain's queue, at most as many messages as it
/// holds credits.
using poller_actor = caf::typed_actor<
  /// From the supervisor: `n` message slots are free again (0: just read
  /// once more, e.g. in tick mode after a commit); no answer.
  caf::reacts_to<atom::credit, int64_t>,
  /// From the supervisor: `n` commands of a capped command type no longer
  /// hold a slot of its cap (docs/scheduling.md, "Per-type
  /// concurrency"); no answer.
  caf::reacts_to<atom::credit, std::string, int64_t>,
  /// From the listener thread (a NOTIFY arrived) or the poller itself (a
  /// drain continues): read now; no answer.
  caf::reacts_to<atom::wakeup>>;

/// The singleton job runner of a worker (actors/worker/job_runner.hpp):
/// runs every registered job at its interval, each run a transaction under
/// the job's advisory lock.
using job_runner_actor = caf::typed_actor<
  /// From itself (at its start): run the jobs that are due; no answer.
  /// Later runs come from its timer.
  caf::reacts_to<atom::wakeup>>;

/// A handler actor: runs one command at a time.
using handler_actor = caf::typed_actor<
  /// From the supervisor: run this command; the answer is its outcome (an
  /// error when the handler actor died meanwhile).
  caf::replies_to<atom::handle, command_ptr>::with<outcome>>;

/// The completion writer: final outcomes (success, troubleshooting queue,
/// business-rule failure), written in group commits.
using completion_actor = caf::typed_actor<
  /// From the supervisor (or, for undecodable messages, the poller through
  /// it): the side effects of one finished command; answered later with
  /// (atom::committed, 1..n) to the supervisor.
  caf::reacts_to<atom::finish, db::finished_command>,
  /// From the supervisor (drain): write what is buffered now; no answer.
  caf::reacts_to<atom::flush>>;

/// The retry scheduler: transient failures (set_vt backoff) and lease
/// extensions.
using retry_scheduler_actor = caf::typed_actor<
  /// From the supervisor: a transient failure to reschedule; answered
  /// later with (atom::committed, 1..n) to the supervisor.
  caf::reacts_to<atom::retry, db::retry_command>,
  /// From the supervisor (drain): write what is buffered now; no answer.
  caf::reacts_to<atom::flush>,
  /// From the supervisor (lease heartbeat, or a handler's extension it
  /// forwards): extend the visibility of (msg_ids) to `seconds`, never
  /// shortening a longer one when `keep_longer`; the answer is the number of
  /// messages that still exist, or an ec::db_unavailable error.
  caf::replies_to<atom::extend, std::vector<int64_t>, int, bool>::with<int>,
  /// From the supervisor (lease heartbeat): claim the deferred deliveries
  /// given (docs/worker.md, "Deferred claims"); the answer is the msg_ids
  /// claimed, or an ec::db_unavailable error.
  caf::replies_to<atom::claim, std::vector<received_command>>::with<
    std::vector<int64_t>>>;

/// The keeper of the connection to one remote handler pool
/// (actors/worker/remote_link.hpp): connects, checks the node's protocol
/// version, reports the pool up and down to its supervisor and reconnects
/// with backoff.
using remote_link_actor = caf::typed_actor<
  /// Internal (timer): try to connect now.
  caf::reacts_to<atom::connect>>;

/// What a remote link tells its supervisor.
using link_parent_actor = caf::typed_actor<
  /// From a remote link: the pool at (address) is connected and offers
  /// (offer). Its slots join the credits; no answer.
  caf::reacts_to<atom::pool_up, std::string, remote::pool_offer,
                 remote::handler_pool_actor>,
  /// From a remote link: the pool at (address) is gone (its down message,
  /// or a failed handshake after an up); its running commands are made
  /// visible again at once and its slots leave the credits. Idempotent; no
  /// answer.
  caf::reacts_to<atom::pool_down, std::string>>;

/// A domain supervisor: owns the poller, the handlers and the two writers of
/// one domain.
using supervisor_actor = caf::typed_actor<
  /// From a handler (handler_context::extend_visibility): extend the
  /// visibility of (msg_ids) to `seconds`; delegated to the retry
  /// scheduler, whose answer it is.
  caf::replies_to<atom::extend, std::vector<int64_t>, int, bool>::with<int>,
  /// From the root: stop intake, finish in-flight work, then answer
  /// atom::done (in tick mode: also once the poller found the queue empty).
  caf::replies_to<atom::drain>::with<atom::done>,
  /// Internal (timer): return the pending credits now, unless this epoch's
  /// credits went out meanwhile.
  caf::reacts_to<atom::credit_due, uint64_t>,
  /// Internal (timer): the lease heartbeat and the writers' watchdog.
  caf::reacts_to<atom::heartbeat>>::extend_with<poller_parent_actor,
                                                writer_parent_actor,
                                                link_parent_actor>;

// -- process managers (process/) ---------------------------------------------

/// A process writer: applies replies to their processes, one transaction
/// each (process/process_writer.hpp).
using process_writer_actor = caf::typed_actor<
  /// From a process actor: apply this reply (state, audit, next command
  /// and the reply message's delete commit together); the answer says what
  /// became of it.
  caf::replies_to<atom::apply, process_reply_message>::with<apply_outcome>,
  /// From the router: move WAITING processes whose command is in the TSQ
  /// to WAITING_FOR_TSQ; the answer is how many moved.
  caf::replies_to<atom::sweep>::with<int64_t>,
  /// Internal: apply the replies received so far, in one transaction.
  caf::reacts_to<atom::flush>>;

/// A process actor: the replies of one process, one at a time
/// (process/process_actor.hpp).
using process_actor = caf::typed_actor<
  /// From the router: a reply for this process; answered later with
  /// (atom::committed, process id, msg_id) to the router.
  caf::reacts_to<atom::handle, process_reply_message>,
  /// From the router, after this actor reported idle and no reply for it
  /// is on the way: quit (normally); no answer.
  caf::reacts_to<atom::stop>,
  /// Internal (timer): try the reply in front again after a backoff.
  caf::reacts_to<atom::retry_due>>;

/// The reply router of a domain's process reply queue
/// (process/router.hpp).
using process_router_actor = caf::typed_actor<
  /// From the root: stop reading, let every reply in flight be dealt with,
  /// then answer atom::done.
  caf::replies_to<atom::drain>::with<atom::done>,
  /// From a process actor: the reply message `msg_id` of process `id` is
  /// dealt with (applied, ignored, archived or left to reappear); no
  /// answer.
  caf::reacts_to<atom::committed, uuid, int64_t>,
  /// From a process actor: it has had nothing to do for a while and may be
  /// stopped; no answer.
  caf::reacts_to<atom::idle, uuid>,
  /// From the listener thread (a NOTIFY arrived), a timer or itself: read
  /// now; no answer.
  caf::reacts_to<atom::wakeup>,
  /// Internal (timer): look for processes whose step is in the TSQ.
  caf::reacts_to<atom::sweep>>;

// -- process-wide actors -----------------------------------------------------

/// The batch counter: runs the batch-completion callbacks.
using batch_counter_actor = caf::typed_actor<
  /// From the root: wait until everything reported before was handled,
  /// then answer atom::done.
  caf::replies_to<atom::drain>::with<atom::done>,
  /// Internal: deliver recorded completions whose lease is free (the first
  /// sweep at start; later ones run on the behaviour's idle timeout).
  caf::reacts_to<atom::sweep>>::extend_with<batch_listener_actor>;

/// The scheduler (actors/worker/scheduler.hpp): fires the due slots of the
/// recurring schedules of the worker's domains.
using scheduler_actor = caf::typed_actor<
  /// Internal (timer, and once at start): fire what is due, then sleep
  /// until the next slot; the number tells the current timer from older
  /// ones, which are ignored.
  caf::reacts_to<atom::wakeup, uint64_t>>;

/// The root: one supervisor per domain, and the batch counter.
using root_actor = caf::typed_actor<
  /// From the runtime (worker::stop, run_tick) or an admin drain: drain
  /// every domain and process router (intake stops for good: nothing is
  /// restarted afterwards), then the batch counter; the answer is
  /// atom::done once nothing is held any more. Repeatable: a stop after an
  /// admin drain asks again.
  caf::replies_to<atom::drain>::with<atom::done>,
  /// Internal (timer): start domain number `i` again after its backoff.
  caf::reacts_to<atom::restart, size_t>>::extend_with<batch_listener_actor>;

/// An admin drain of a running worker (actors/worker/admin_drain.hpp): asks
/// the root to drain and tells the worker facade when it answered.
using admin_drain_actor = caf::typed_actor<
  /// Internal (timer): the drain's bound (the shutdown timeout) passed
  /// without the root's answer.
  caf::reacts_to<atom::overdue>>;

// -- handler node (actors/node/) ----------------------------------------------

/// A handler thread of a node (detached): runs one command at a time.
using node_handler_actor = caf::typed_actor<
  /// From its pool: run this delivery; the lease actor takes the handler's
  /// extend_visibility calls. The answer is the outcome.
  caf::replies_to<atom::handle, remote::wire_command,
                  remote::lease_actor>::with<remote::wire_outcome>>;

/// The handlers of one domain on a node, with a queue.
using node_pool_actor = caf::typed_actor<
  /// From a session: run this delivery on a free handler (queued until one
  /// is free); the answer is its outcome, or ec::remote_unavailable once the
  /// node stops.
  caf::replies_to<atom::handle, remote::wire_command,
                  remote::lease_actor>::with<remote::wire_outcome>,
  /// From the facade (stop): take no more commands; answers atom::done once
  /// none is queued or running.
  caf::replies_to<atom::drain>::with<atom::done>>;

} // namespace cmdbus::actors

// -- operations: the admin actor (actors/ops/admin.hpp) -----------------------

namespace cmdbus::admin {

/// WIRE, frozen: every request carries the admin protocol version
/// (admin::protocol_version) and the answer is a JSON document whose fields
/// only ever grow. The admin actor of a worker or node, published on its
/// admin port.
using admin_actor = caf::typed_actor<
  /// From `cmdbus cluster status`: (status, admin protocol version): the
  /// status JSON, or ec::protocol_mismatch for another version.
  caf::replies_to<atom::status, int32_t>::with<std::string>,
  /// From `cmdbus cluster drain`: (drain, admin protocol version): a worker
  /// stops taking new work (its pollers stop; running commands finish) and
  /// answers its status JSON, "readiness" "draining" and later "drained"; a
  /// node answers ec::unsupported (it takes no work of its own).
  caf::replies_to<atom::drain, int32_t>::with<std::string>>;

static_assert(actors::carries_only_wire_types<admin_actor>::value);

} // namespace cmdbus::admin
