#pragma once

// One CAF actor system of cmdbus, started and ended the same way wherever
// one runs: the worker's runtime, a handler node, and the admin server and
// client (which run in a system of their own, so that the admin port keeps
// answering while a worker's actors drain or stop).
//
// Start: a fresh configuration with our error category, work-sharing
// scheduler threads, and the network (CAF's middleman; OpenSSL with a
// certificate set) only for a process that talks to others, so that a
// plain worker starts no network thread.
//
// End: the last handle hands the system to a thread of its own, which
// destroys it (~actor_system waits for every actor) together with its
// configuration (the system refers to it until then). A handler stuck in
// application code, which nothing can interrupt, then keeps that thread
// waiting, never the caller; retire() waits a grace period for it.
//
// CAF keeps a reference to its logger in a thread-local of every thread
// that spawned or messaged actors, and the system's destructor waits until
// the logger is gone: every application thread that touches a system drops
// that reference when done (release_thread_logger).
//
// Only actor code includes this (CAF forward declarations).

#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <optional>

#include <caf/fwd.hpp>

#include "cmdbus/actors/network.hpp"

namespace cmdbus::actors {

/// How an actor system is started.
struct host_settings {
  /// Scheduler threads.
  size_t threads = 2;
  /// The network; none: no middleman is loaded.
  std::optional<network_settings> network;
};

/// One running actor system with its configuration. Thread-safe.
class system_host {
public:
  /// Starts an actor system (see the top of this file). Throws
  /// config::config_error when the network's TLS set is unusable
  /// (configure_network), std::runtime_error "cannot start the actor
  /// system: ..." when CAF refuses to start (its OpenSSL module throws for
  /// certificates it cannot use).
  static std::shared_ptr<system_host> start(const host_settings& settings);

  system_host(const system_host&) = delete;
  system_host& operator=(const system_host&) = delete;

  /// Hands the system to a thread of its own for destruction.
  ~system_host();

  /// The actor system.
  caf::actor_system& system() noexcept;

  /// Becomes ready once the system is destroyed.
  std::shared_future<void> gone() const;

  struct impl;

private:
  explicit system_host(std::unique_ptr<impl> ptr);
  std::unique_ptr<impl> impl_;
};

/// Drops `host` and waits up to `grace` for its actor system to be gone.
/// Returns whether it is; otherwise it ends in the background.
bool retire(std::shared_ptr<system_host> host,
            std::chrono::milliseconds grace);

/// Drops this thread's reference to the logger of the actor system it
/// touched last (see the top of this file).
void release_thread_logger() noexcept;

} // namespace cmdbus::actors
