#include "cmdbus/actors/remote_protocol.hpp"

#include <cstdlib>

#include <caf/actor_system_config.hpp>

#include "cmdbus/model/errors.hpp"

namespace cmdbus::remote {

namespace {

uuid parse_uuid(const std::string& text, const char* what) {
  auto id = uuid::parse(text);
  if (!id)
    throw decode_error(std::string{"remote delivery: "} + what
                       + " is not a UUID");
  return *id;
}

caf::optional<std::string> to_wire(const std::optional<uuid>& x) {
  if (!x)
    return caf::none;
  return x->to_string();
}

caf::optional<std::string> to_wire(const std::optional<std::string>& x) {
  if (!x)
    return caf::none;
  return *x;
}

outcome protocol_error(std::string message) {
  outcome out;
  out.kind = outcome_kind::transient;
  out.error_code = "REMOTE_PROTOCOL_ERROR";
  out.error_message = std::move(message);
  return out;
}

} // namespace

int32_t effective_protocol_version() {
  static const int32_t version = [] {
    // Test-only: a node that pretends to speak another version.
    if (const char* v = std::getenv("CMDBUS_TEST_PROTOCOL_VERSION");
        v != nullptr && *v != '\0')
      return static_cast<int32_t>(std::atoi(v));
    return protocol_version;
  }();
  return version;
}

wire_command to_wire(const received_command& rc) {
  wire_command x;
  x.domain = rc.cmd.domain;
  x.command_type = rc.cmd.command_type;
  x.command_id = rc.cmd.command_id.to_string();
  x.data = rc.cmd.data.text();
  x.correlation_id = to_wire(rc.cmd.correlation_id);
  x.reply_to = to_wire(rc.cmd.reply_to);
  x.batch_id = to_wire(rc.batch_id);
  x.msg_id = rc.msg_id;
  x.attempt = rc.attempt;
  x.max_attempts = rc.max_attempts;
  return x;
}

received_command from_wire(const wire_command& x) {
  received_command rc;
  rc.cmd.domain = x.domain;
  rc.cmd.command_type = x.command_type;
  rc.cmd.command_id = parse_uuid(x.command_id, "command_id");
  rc.cmd.data = json::parse(x.data);
  if (x.correlation_id)
    rc.cmd.correlation_id = parse_uuid(*x.correlation_id, "correlation_id");
  if (x.reply_to)
    rc.cmd.reply_to = *x.reply_to;
  if (x.batch_id)
    rc.batch_id = parse_uuid(*x.batch_id, "batch_id");
  rc.msg_id = x.msg_id;
  rc.attempt = x.attempt;
  rc.max_attempts = x.max_attempts;
  return rc;
}

wire_outcome to_wire(const outcome& out, std::chrono::nanoseconds handler_time) {
  wire_outcome x;
  x.kind = static_cast<int32_t>(out.kind);
  x.result = out.result.text();
  x.error_code = out.error_code;
  x.error_message = out.error_message;
  x.error_details = out.error_details.text();
  x.handler_ns = handler_time.count();
  return x;
}

outcome from_wire(const wire_outcome& x) {
  if (x.kind < static_cast<int32_t>(outcome_kind::success)
      || x.kind > static_cast<int32_t>(outcome_kind::business_rule))
    return protocol_error("the handler node answered an unknown outcome kind "
                          + std::to_string(x.kind));
  outcome out;
  out.kind = static_cast<outcome_kind>(x.kind);
  out.error_code = x.error_code;
  out.error_message = x.error_message;
  try {
    out.result = json::parse(x.result);
    out.error_details = json::parse(x.error_details);
  } catch (const decode_error& e) {
    return protocol_error(std::string{"the handler node answered bad JSON: "}
                          + e.what());
  }
  return out;
}

std::string refuse_offer(const pool_offer& offer, int32_t expected_protocol,
                         std::chrono::milliseconds connection_timeout) {
  auto node = "handler node '" + offer.node_name + "'";
  if (offer.protocol != expected_protocol)
    return node + " speaks protocol " + std::to_string(offer.protocol)
           + ", this worker speaks " + std::to_string(expected_protocol);
  if (offer.slots <= 0)
    return node + " offers no handler slots";
  if (offer.heartbeat_ms <= 0)
    return node + " sends no heartbeats (its connection would be cut)";
  if (2 * offer.heartbeat_ms >= connection_timeout.count())
    return node + " sends heartbeats every " + std::to_string(offer.heartbeat_ms)
           + " ms, too slow for this worker's connection timeout of "
           + std::to_string(connection_timeout.count())
           + " ms (use the same heartbeat interval on both sides)";
  return {};
}

void add_remote_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<wire_command>("cmdbus::wire_command");
  cfg.add_message_type<wire_outcome>("cmdbus::wire_outcome");
  cfg.add_message_type<pool_offer>("cmdbus::pool_offer");
  cfg.add_message_type<std::vector<int64_t>>("std::vector<int64_t>");
}

} // namespace cmdbus::remote
