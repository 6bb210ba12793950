#pragma once

// The configuration of a handler node (actors/node.hpp runs one): the
// domains it serves, its handlers per domain, where it listens, its name,
// heartbeat, TLS set and admin port. No CAF includes.

#include <chrono>
#include <string>
#include <vector>

#include "cmdbus/config/network_config.hpp"

namespace cmdbus::config {

/// Everything a handler node needs.
struct node_config {
  /// The domains it serves; at least one, each a valid domain name, no
  /// duplicates, each with at least one handler.
  std::vector<std::string> domains;

  /// Handlers that run at once per domain (threads); 1..4096. Each worker
  /// that connects is offered this many slots; a node shared by several
  /// workers queues what exceeds them.
  int concurrency = 16;

  /// Where to listen: "HOST:PORT", "[IPV6]:PORT" or ":PORT" (127.0.0.1);
  /// port 0 picks a free one (see handler_node::port). Loopback unless
  /// configured otherwise.
  std::string listen = "127.0.0.1:7400";

  /// The node's name in logs, offers and the demo's results; "" means
  /// HOSTNAME:PORT.
  std::string name;

  /// How often the connection sends a heartbeat; a peer silent for 3 ×
  /// this is cut. Workers must use the same interval (100 ms .. 1 h).
  std::chrono::milliseconds heartbeat_interval{1000};

  /// Certificates (mutual TLS); empty: cleartext, unauthenticated.
  tls_config tls;

  /// Where to publish the admin actor (`cmdbus cluster status`;
  /// actors/ops/admin.hpp): "HOST:PORT" like `listen`; "" (the default)
  /// publishes none. Same TLS set as the door.
  std::string admin;

  /// How long a handler's extend_visibility waits for the worker's answer.
  std::chrono::milliseconds extend_timeout{30000};
};

/// Problems of `cfg` (empty when valid), one sentence each.
std::vector<std::string> validate(const node_config& cfg);

} // namespace cmdbus::config
