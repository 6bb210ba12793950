#pragma once

// The steps of a domain supervisor that its two files share (internal to
// them): supervisor.cpp holds local dispatch, credits, the writers' side
// and the lifecycle; supervisor_remote.cpp the remote handler pools
// (membership, routing, giving commands back).

#include <cstdint>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "cmdbus/actors/worker/supervisor.hpp"

namespace cmdbus::actors::supervisor_steps {

using self_ptr = supervisor_actor::stateful_pointer<supervisor_state>;

// -- supervisor.cpp -----------------------------------------------------------

/// Routes a handler's outcome to the writer that owns its side effects.
void route(self_ptr self, const received_command& rc, outcome out);

/// Starts every waiting command that has a free slot on its route.
void dispatch(self_ptr self);

/// `n` slots became free: their credits go back to the poller (at once or
/// after the flush interval).
void handler_freed(self_ptr self, int64_t n);

/// Fewer messages are held: withheld credits may go out, a drain may end.
void progress(self_ptr self);

/// Returns the pending credits to the poller now, as far as the hold limit
/// allows.
void flush_credit(self_ptr self);

/// A local command held its slot for `took`: `prefetch = auto` may resize
/// the prefetch (more or fewer credits).
void tune_prefetch(self_ptr self, std::chrono::nanoseconds took);

/// Whether a command of `type` may start now: its type is not capped, or
/// fewer than its cap run.
bool below_cap(const supervisor_state& st, const std::string& type);

/// A command of `type` started running (counted against its cap).
void cap_started(supervisor_state& st, const std::string& type);

/// A command of `type` is no longer held (it finished, its handler died,
/// or it went back to the queue): its cap's slot is free again and goes
/// back to the poller. `was_running` says whether it had started.
void cap_released(self_ptr self, const std::string& type, bool was_running);

// -- supervisor_remote.cpp ----------------------------------------------------

/// Where a waiting command goes when the domain has remote pools.
enum class remote_route {
  /// Started in a remote pool.
  started,
  /// Waits for a slot of a pool of its type (or for a missing pool).
  waits,
  /// Runs locally (a local handler serves its type, or nothing else will).
  local,
};

/// Starts `w` in the least busy connected pool that serves its type, unless
/// a local handler serves it; says where it goes.
remote_route route_remote(self_ptr self, supervisor_state::waiting& w);

/// Gives back waiting commands that no connected pool serves and no local
/// handler runs: all of them (`all`: a drain), or those read at least a
/// visibility timeout ago.
void release_waiting(self_ptr self, bool all);

/// Removes the remote pool at `address`, if connected: its running
/// commands are made visible again at once, its slots leave the credits.
void drop_pool(self_ptr self, const std::string& address,
               const std::string& why);

/// A remote pool connected: its slots join the credits.
void add_pool(self_ptr self, const std::string& address,
              const remote::pool_offer& offer,
              const remote::handler_pool_actor& hdl);

/// Spawns the keeper of the connection to configured pool number `i`.
void add_link(self_ptr self, size_t i);

/// Replaces a dead remote link; returns false if `source` is none of them.
bool replace_link(self_ptr self, const caf::actor_addr& source,
                  const caf::error& reason);

/// Stops reconnecting (a drain).
void stop_links(self_ptr self);

} // namespace cmdbus::actors::supervisor_steps
