#pragma once

// The admin actor of a worker or a handler node: what `cmdbus cluster
// status` shows and what `cmdbus cluster drain` asks. Opt-in: a worker
// publishes it with [admin] listen (--admin, CMDBUS_ADMIN), a node with
// --admin (CMDBUS_NODE_ADMIN). It runs in an actor system of its own, so
// that it keeps answering while the worker's actors drain or stop, and it
// listens like a node's door: loopback unless configured otherwise, TLS
// with the process's certificate set.
//
// The interface (admin::admin_actor in actors/interfaces.hpp) is frozen:
// every request carries the admin protocol version, and the answer is a
// JSON document whose fields only ever grow (docs/cli.md lists them;
// admin_view.hpp writes it). A process of another admin version answers
// ec::protocol_mismatch.
//
// Only actor code and the cluster command include this (CAF headers).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/network.hpp"
#include "cmdbus/actors/ops/admin_view.hpp"

namespace cmdbus::admin {

/// A published admin actor, until destroyed.
class server {
public:
  /// Starts an actor system with `net` (actors/system_host.hpp), spawns
  /// the admin actor over `src` and publishes it on `listen` ("HOST:PORT",
  /// ":PORT" = 127.0.0.1, port 0 a free one). Throws config::config_error
  /// for an unusable TLS set or a malformed address, std::runtime_error
  /// when it cannot listen.
  server(source src, const std::string& listen,
         const actors::network_settings& net);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// The bound port.
  uint16_t port() const noexcept;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// One admin actor's answer.
struct answer {
  std::string address;
  /// Whether it answered; else `error` says why (unreachable, refused,
  /// another interface or version, timeout).
  bool reached = false;
  /// The status JSON (when reached).
  std::string json;
  std::string error;
  /// ec::unsupported: the process refused the request (a node's drain).
  bool unsupported = false;
};

/// Talks to admin actors (the `cmdbus cluster` command).
class client {
public:
  /// Starts an actor system with `net` (no listening;
  /// actors/system_host.hpp).
  explicit client(const actors::network_settings& net);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Asks every address at once ("HOST:PORT") for its status, or to drain
  /// (`drain`); each connection and request within `timeout`. Answers in
  /// the order of `addresses`.
  std::vector<answer> ask(const std::vector<std::string>& addresses,
                          bool drain, std::chrono::milliseconds timeout);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace cmdbus::admin
