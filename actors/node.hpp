#pragma once

// A handler node: runs command handlers for workers on other machines, with
// no database access of its own. A worker configured with the node's
// address (`[remote] pools`) connects, and sends it the commands of the
// types the node has handlers for; the worker keeps every side effect
// (results, retries, the troubleshooting queue) in its own transactions.
//
//   cmdbus::handler_registry handlers;
//   handlers.add("payments", "FraudCheck", fraud_check);
//   cmdbus::node_config cfg;
//   cfg.domains = {"payments"};
//   cfg.listen = "10.0.0.5:7400";       // loopback (127.0.0.1:7400) by default
//   cfg.tls = {...};                    // strongly advised off loopback
//   cmdbus::handler_node node{cfg, std::move(handlers)};
//   node.start();                       // publishes; returns the port
//   ... until SIGTERM ...
//   node.stop(std::chrono::seconds{30});
//
// Handlers run at least once: a command whose node dies or whose connection
// drops is made visible again by the worker and may run a second time
// (elsewhere) while the first run still finishes; only the worker's side
// effects are exactly once. cli/node_main.hpp is the whole program (options,
// environment, signals, exit codes) around this class; actors/node/ holds its
// actors. No CAF here.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/config/node_config.hpp"

namespace cmdbus {

/// Everything a handler node needs (config/node_config.hpp).
using node_config = config::node_config;

/// A handler node's figures.
struct node_status {
  /// Handler slots over all domains (domains × concurrency).
  int64_t slots = 0;
  /// Handlers running now.
  int64_t busy = 0;
  /// Commands waiting for a free handler.
  int64_t queued = 0;
  /// Connected worker sessions (one per worker and domain).
  int64_t sessions = 0;
  /// Handler runs finished since the start.
  int64_t completed = 0;
};

/// A running handler node (see the top of this file). Thread-safe.
class handler_node {
public:
  /// Takes the configuration and the handlers; starts nothing.
  handler_node(node_config cfg, handler_registry registry);

  /// Stops the node if it runs (stop with a short timeout).
  ~handler_node();

  handler_node(const handler_node&) = delete;
  handler_node& operator=(const handler_node&) = delete;

  /// Starts the actors and publishes the node; returns the bound port.
  /// Throws config::config_error for an invalid configuration (validate,
  /// the TLS set), std::runtime_error when it cannot listen (the address is
  /// in use or not local, the certificates cannot be loaded).
  uint16_t start();

  /// Stops taking new workers and commands, lets the running handlers
  /// finish for up to `timeout` (their cancelled() turns true), then ends
  /// the connections. Commands still running then are released by their
  /// workers. Later calls do nothing.
  void stop(std::chrono::milliseconds timeout);

  /// The bound port (0 before start).
  uint16_t port() const;

  /// The node's name (node_config::name, or HOSTNAME:PORT once started).
  std::string name() const;

  /// The current figures.
  node_status status() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace cmdbus
