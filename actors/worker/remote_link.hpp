#pragma once

// The worker's side of a remote handler pool: one actor per (domain,
// configured "HOST:PORT"), spawned and linked by the domain's supervisor.
// It connects through the middleman (never blocking a scheduler thread),
// checks that the peer is a cmdbus handler node, says hello with this
// worker's protocol version and a lease actor (the only actor of the worker
// the node learns of: it forwards visibility extensions to the supervisor)
// and gets the node's offer (its command types and slots) and a handler
// pool actor for the domain. It monitors that
// pool and reports it to the supervisor, which monitors it too: pool_up
// when connected, pool_down when it is lost. It then reconnects with a
// capped exponential backoff (250 ms doubling to [remote] reconnect-max,
// jittered), and the supervisor adds the pool back when it returns.
//
// A refusal (another protocol version, TLS, a peer that is not a cmdbus
// node) is logged as an error once per distinct reason (then at debug
// level) and retried like any failure, so that a rolling upgrade heals by
// itself.

#include <chrono>
#include <random>
#include <string>

#include <caf/fwd.hpp>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/worker/spawn.hpp"

namespace cmdbus::actors {

/// State of a remote link.
struct remote_link_state {
  domain_settings settings;
  /// "HOST:PORT" as configured (the key the supervisor knows the pool by).
  std::string address;
  std::string host;
  uint16_t port = 0;
  supervisor_actor parent;
  /// What the node may call back (extensions only), spawned at the first
  /// hello and linked to the link.
  remote::lease_actor lease;
  /// The connected pool; null while disconnected.
  remote::handler_pool_actor pool;
  /// Consecutive failures (0 while connected).
  int failures = 0;
  /// When the pool connected (a connection that lasted a minute resets
  /// the backoff).
  std::chrono::steady_clock::time_point connected_at;
  /// The last failure logged as an error.
  std::string last_error;
  std::mt19937_64 rng{std::random_device{}()};
  /// "remote/<domain>/<address>".
  std::string name;
};

/// The link's behaviour. A pool that offers the wrong protocol version, no
/// slots, or a heartbeat that does not fit this worker's connection
/// timeout is refused.
remote_link_actor::behavior_type
remote_link(remote_link_actor::stateful_pointer<remote_link_state> self,
            domain_settings settings, std::string address,
            supervisor_actor parent);

/// The production spawner: a scheduled link for `address`, linked to
/// `parent` (spawners::remote).
remote_link_actor spawn_remote_link(supervisor_actor::pointer parent,
                                    const domain_settings& settings,
                                    const std::string& address);

/// Returns the name this worker gives itself in its hello: the host name
/// and the process id ("host/1234").
std::string worker_identity();

} // namespace cmdbus::actors
