#pragma once

// What travels between a worker and a handler node (`cmdbus node`) over CAF's
// middleman: the protocol version and the wire form of a delivery, of its
// outcome and of a node's offer. The typed interfaces that carry them (the
// node's door, a session's handler pool, the worker's lease forwarder) are
// in actors/interfaces.hpp, marked "wire".
//
// Model types never cross the network: a delivery travels as a wire_command
// (payloads as compact JSON text, UUIDs as text), its outcome as a
// wire_outcome. Every wire type is registered on both sides under the same
// name (add_remote_types), or CAF's interface check refuses the peer.
//
// The handshake runs over the *door* (node_door_actor), whose interface never
// changes: a worker of any cmdbus version can connect to it and say hello with
// its protocol version. A node of another version answers
// ec::protocol_mismatch (and logs it); a node of the same version answers a
// pool_offer and a session actor implementing handler_pool_actor, which may
// change from one protocol version to the next (bump protocol_version with
// any change of handler_pool_actor, lease_actor, wire_command or
// wire_outcome; node_door_actor and pool_offer are frozen).
//
// Only actor code and actor tests include this (CAF headers).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include "cmdbus/model/outcome.hpp"

namespace cmdbus::remote {

/// The version of the messages between a worker and a node's session.
inline constexpr int32_t protocol_version = 1;

/// The protocol version this process speaks: protocol_version, unless the
/// test-only environment variable CMDBUS_TEST_PROTOCOL_VERSION is set (read
/// once; the version-mismatch tests use it).
int32_t effective_protocol_version();

/// One delivery, as the node's handler sees it.
struct wire_command {
  std::string domain;
  std::string command_type;
  /// The command id, as UUID text.
  std::string command_id;
  /// The payload, compact JSON text.
  std::string data;
  caf::optional<std::string> correlation_id;
  caf::optional<std::string> reply_to;
  caf::optional<std::string> batch_id;
  int64_t msg_id = 0;
  int32_t attempt = 0;
  int32_t max_attempts = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_command& x) {
  return f(caf::meta::type_name("cmdbus::wire_command"), x.domain,
           x.command_type, x.command_id, x.data, x.correlation_id, x.reply_to,
           x.batch_id, x.msg_id, x.attempt, x.max_attempts);
}

/// How a handler run on the node ended.
struct wire_outcome {
  /// outcome_kind as an integer (checked on receipt).
  int32_t kind = 0;
  /// The result (success), compact JSON text.
  std::string result = "null";
  std::string error_code;
  std::string error_message;
  /// The error details (failures), compact JSON text.
  std::string error_details = "{}";
  /// The handler's own run time on the node (the remote hop's cost is the
  /// worker's total minus this).
  int64_t handler_ns = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_outcome& x) {
  return f(caf::meta::type_name("cmdbus::wire_outcome"), x.kind, x.result,
           x.error_code, x.error_message, x.error_details, x.handler_ns);
}

/// The node's answer to hello (frozen, like the door).
struct pool_offer {
  /// The node's protocol version.
  int32_t protocol = protocol_version;
  /// The node's name (--name; default host:port).
  std::string node_name;
  /// The command types the node handles in the requested domain, sorted.
  std::vector<std::string> command_types;
  /// How many commands the worker may have running there at once.
  int32_t slots = 0;
  /// The node's middleman heartbeat interval in milliseconds (0: off).
  int64_t heartbeat_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_offer& x) {
  return f(caf::meta::type_name("cmdbus::pool_offer"), x.protocol,
           x.node_name, x.command_types, x.slots, x.heartbeat_ms);
}

/// Returns the wire form of `rc`.
wire_command to_wire(const received_command& rc);

/// Returns the delivery `x` describes; throws decode_error (a bad UUID or
/// JSON text), which the node answers as a permanent failure.
received_command from_wire(const wire_command& x);

/// Returns the wire form of `out`, with the handler's own run time.
wire_outcome to_wire(const outcome& out,
                     std::chrono::nanoseconds handler_time = {});

/// Returns the outcome `x` describes; an unknown kind or an unreadable JSON
/// text becomes a transient failure REMOTE_PROTOCOL_ERROR (the command runs
/// again), never an exception.
outcome from_wire(const wire_outcome& x);

/// Why a worker refuses `offer` (empty: accepted): another protocol
/// version than `expected_protocol`, no slots, heartbeats off on the node,
/// or a node heartbeat so slow that the worker's `connection_timeout` would
/// cut healthy connections (2 × heartbeat must stay below it).
std::string refuse_offer(const pool_offer& offer, int32_t expected_protocol,
                         std::chrono::milliseconds connection_timeout);

/// Registers the wire types (and the other non-builtin types of the wire
/// interfaces in actors/interfaces.hpp) with `cfg` under their portable names. Both sides call
/// it (configure_network does).
void add_remote_types(caf::actor_system_config& cfg);

} // namespace cmdbus::remote
