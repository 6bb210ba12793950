#pragma once

// The poller of a domain: reads {domain}__commands with credits (never more
// messages than the domain can run), woken by LISTEN/NOTIFY (a listener
// thread) or its poll timer.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <caf/actor_clock.hpp>

#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/actors/worker/listener.hpp"
#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/db/worker_store.hpp"

namespace cmdbus::actors {

/// How the poller reads: (visibility timeout in seconds, most messages, how
/// to choose them) -> what it read; throws on failure. Tests replace the
/// database with it.
using receive_fn
  = std::function<db::receive_result(int, int, const db::read_options&)>;

/// State of a poller.
struct poller_state {
  poller_state();
  ~poller_state();

  domain_settings settings;
  poller_parent_actor parent;
  std::unique_ptr<db_session> session;
  receive_fn receive;
  std::unique_ptr<listener> listen;
  /// Free message slots: the poller never holds more than it can run.
  int64_t credits = 0;
  /// Credit messages received, per-type ones included (echoed in
  /// atom::idle).
  int64_t credits_seen = 0;
  /// Free slots of each capped command type (its cap minus the commands of
  /// it read and not yet given back by the supervisor): the read's
  /// per-type limits.
  std::map<std::string, int64_t> type_credits;
  /// Messages claimed by this poller's reads, and how many of them were
  /// taken oldest-first (with priorities: the starvation bound).
  int64_t claimed = 0;
  int64_t claimed_oldest = 0;
  /// When to read again if nothing else happens (poll interval, idle
  /// backoff or error backoff); unset in tick mode.
  std::optional<std::chrono::milliseconds> next_poll;
  /// Consecutive empty reads (idle backoff).
  int empty_reads = 0;
  /// Whether a listener wakes this poller on a NOTIFY. Then a credit makes
  /// it read only when the last read may have left messages behind, or
  /// when the poll is due; else every credit reads (only the poll timer
  /// would see new messages).
  bool notified = false;
  /// Whether the last read may have left messages behind: it was full, it
  /// failed, or it was skipped for want of credits.
  bool behind = true;
  /// When the last read started. Credits that arrive without pause keep
  /// the poll timer (an idle timeout) from firing, so a credit checks
  /// whether the poll is due.
  caf::actor_clock::time_point last_read;
  /// Whether a wakeup is in the mailbox (ours or the listener's): credits
  /// and NOTIFYs that arrive before it are read together (one large read
  /// instead of several small ones).
  std::shared_ptr<wakeup_latch> wake = std::make_shared<wakeup_latch>();
  std::mt19937_64 rng{std::random_device{}()};
  /// "poller/<domain>".
  std::string name;
};

/// Returns how a read of `qty` messages chooses them: the free slots of
/// every capped type as its limit and, with priorities, the oldest-first
/// share that keeps at least one in every `fifo_every` claims
/// oldest-first: floor((claimed + qty) / fifo_every) - claimed_oldest.
db::read_options read_options_for(const poller_state& st, int qty);

/// Returns the idle backoff after `empty_reads` consecutive empty reads:
/// `min_ms` after the first, doubling per empty read up to `max_ms`, +/-
/// `jitter` (a fraction), at least 1 ms.
std::chrono::milliseconds idle_delay(double min_ms, double max_ms,
                                     double jitter, int empty_reads,
                                     std::mt19937_64& rng);

/// Returns the idle backoff of a poll interval alone: a quarter of it
/// after the first empty read, doubling up to it, +/- 20 % (the defaults
/// of the loop timing; the process reply routers use it).
std::chrono::milliseconds idle_delay(std::chrono::milliseconds poll_interval,
                                     int empty_reads, std::mt19937_64& rng);

/// Returns the idle backoff of the worker's loop timing (idle-backoff-min,
/// idle-backoff-max, idle-jitter; docs/worker.md "Loop timing").
std::chrono::milliseconds idle_delay(const config::worker_config& cfg,
                                     int empty_reads, std::mt19937_64& rng);

/// The poller's behaviour: reads at most `credits` messages whenever it got
/// credits, a NOTIFY arrived, or its timer fired; sends what it read to
/// `parent` as (atom::run, commands), undecodable claimed ones as
/// (atom::finish, ...), and (atom::idle, credits_seen) after an empty read.
/// A full read is followed by another at once (or after the busy delay);
/// otherwise it reads again after the poll interval, after the idle backoff
/// (empty reads), or after the error backoff; in tick mode only when
/// credits arrive, and not beyond the run's limits (domain_settings::
/// tick_limit: it then reports idle and marks the run cut). A domain with
/// priorities or per-type caps reads through cmdbus_read
/// (read_options_for): each capped type within its own credits, which the
/// supervisor returns as (atom::credit, type, n).
/// @param self The poller.
/// @param settings Its domain's settings.
/// @param parent Its supervisor.
/// @param receive How it reads; the database when empty.
poller_actor::behavior_type
poller(poller_actor::stateful_pointer<poller_state> self,
       domain_settings settings, poller_parent_actor parent,
       receive_fn receive);

/// Spawns the production poller of `settings` (detached), linked to
/// `parent`.
poller_actor spawn_poller(supervisor_actor::pointer parent,
                          const domain_settings& settings);

} // namespace cmdbus::actors
