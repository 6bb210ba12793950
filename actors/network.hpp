#pragma once

// The network set-up of a process that talks to other cmdbus processes over
// CAF's middleman (BASP): a worker with remote handler pools, `cmdbus node`.
// A process that needs none of it never calls configure_network, so it loads
// no middleman and starts no network thread.
//
// Every process configured here sends heartbeats (a peer that sends none
// would be cut by the other's connection timeout), uses the application
// identifier "cmdbus" (CAF peers of another application are refused during
// the BASP handshake; not a security measure), registers the wire types and
// our error category, and with TLS loads CAF's OpenSSL module, whose
// sessions our own TLS connections use (tls_transport.hpp: the module's own
// connections spin and fail healthy peers under faults).
//
// Only actor code includes this (CAF headers).

#include <chrono>
#include <cstdint>
#include <set>
#include <string>

#include <caf/actor.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/io/middleman_actor.hpp>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/config/network_config.hpp"

namespace cmdbus::actors {

/// How a process talks to other cmdbus processes.
struct network_settings {
  /// The middleman's heartbeat interval (> 0). The connection timeout is
  /// connection_timeout(heartbeat).
  std::chrono::milliseconds heartbeat{1000};
  /// Certificates; empty: cleartext connections.
  config::tls_config tls;
};

/// The connection timeout that goes with `heartbeat`: 3 × heartbeat (a peer
/// silent that long is cut, its actors reported down).
std::chrono::milliseconds connection_timeout(std::chrono::milliseconds heartbeat);

/// Loads the middleman (and, with TLS, the OpenSSL manager) into `cfg` and
/// sets the heartbeat, the connection timeout, the application identifier,
/// the TLS options, the wire types (remote::add_remote_types) and our error
/// category (add_error_category). Throws config::config_error when
/// settings.tls is invalid (validate_tls) or its files are not a usable
/// certificate, key (matching the certificate) and CA set, before the actor
/// system sees them.
void configure_network(caf::actor_system_config& cfg,
                       const network_settings& settings);

/// Whether the actor system was configured with TLS (the OpenSSL manager is
/// loaded).
bool uses_tls(caf::actor_system& sys);

/// Publishes a node's door (or an admin actor, admin.hpp) on `listen`
/// ("HOST:PORT", ":PORT" = 127.0.0.1, port 0 = a free one), through TLS
/// (tls_middleman) when the system uses it. Returns the bound port or the
/// middleman's error (in use, cannot bind, ...); throws
/// std::invalid_argument for a malformed `listen`. Defined for those two
/// handle types only (network.cpp).
template <class Handle>
caf::expected<uint16_t> publish(caf::actor_system& sys, const Handle& whom,
                                const std::string& listen);

/// The actor to ask for a connection from inside an actor, without
/// blocking: request(connector(sys), timeout, caf::connect_atom::value, host,
/// port) answers (node_id, strong_actor_ptr, interface) or an error. TLS
/// (tls_middleman) when the system uses it.
caf::io::middleman_actor connector(caf::actor_system& sys);

/// Whether `ifs` (the interface a connect answered) is that of
/// remote::node_door_actor in this process (the same names registered).
bool is_node_door(caf::actor_system& sys, const std::set<std::string>& ifs);

} // namespace cmdbus::actors
