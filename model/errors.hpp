#pragma once

#include <stdexcept>
#include <string>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus {

/// Base of every error of the command bus API (the reference's
/// CommandBusError).
class command_bus_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Input that cannot be decoded: malformed JSON, a missing field, a wrong
/// type, a bad UUID, invalid UTF-8, nesting too deep, input too large.
class decode_error : public command_bus_error {
public:
  using command_bus_error::command_bus_error;
};

/// An error about one (domain, id) pair: a command or a batch.
class keyed_error : public command_bus_error {
public:
  keyed_error(const std::string& what, std::string domain, uuid id)
    : command_bus_error(what), domain_(std::move(domain)), id_(id) {
    // nop
  }
  const std::string& domain() const noexcept {
    return domain_;
  }

protected:
  const uuid& id() const noexcept {
    return id_;
  }

private:
  std::string domain_;
  uuid id_;
};

/// A command with this (domain, command_id) exists already.
class duplicate_command_error : public keyed_error {
public:
  duplicate_command_error(std::string domain, uuid command_id)
    : keyed_error("duplicate command " + command_id.to_string() + " in domain "
                    + domain,
                  domain, command_id) {
    // nop
  }
  const uuid& command_id() const noexcept {
    return id();
  }
};

/// No command with this (domain, command_id).
class command_not_found_error : public keyed_error {
public:
  command_not_found_error(std::string domain, uuid command_id)
    : keyed_error("command " + command_id.to_string() + " not found in domain "
                    + domain,
                  domain, command_id) {
    // nop
  }
  const uuid& command_id() const noexcept {
    return id();
  }
};

/// No batch with this (domain, batch_id).
class batch_not_found_error : public keyed_error {
public:
  batch_not_found_error(std::string domain, uuid batch_id)
    : keyed_error("batch " + batch_id.to_string() + " not found in domain "
                    + domain,
                  domain, batch_id) {
    // nop
  }
  const uuid& batch_id() const noexcept {
    return id();
  }
};

/// An operation that the current state does not allow (e.g. an operator
/// retry of a command that is not in the troubleshooting queue).
class invalid_operation_error : public command_bus_error {
public:
  using command_bus_error::command_bus_error;
};

/// Base of the errors a command handler throws to choose the outcome of a
/// command, as the reference's exceptions do. `code` and `message` end up in
/// last_error_code / last_error_msg and the audit trail; `details` (a JSON
/// object) in the audit details and, for business-rule failures, in the
/// FAILED reply.
class handler_error : public command_bus_error {
public:
  handler_error(std::string code, std::string message,
                json details = json::object())
    : command_bus_error("[" + code + "] " + message), code_(std::move(code)),
      message_(std::move(message)), details_(std::move(details)) {
    // nop
  }
  const std::string& code() const noexcept {
    return code_;
  }
  const std::string& error_message() const noexcept {
    return message_;
  }
  const json& details() const noexcept {
    return details_;
  }

private:
  std::string code_;
  std::string message_;
  json details_;
};

/// A failure that may go away: the command is retried with backoff until its
/// max_attempts are used up, then moved to the troubleshooting queue.
class transient_command_error : public handler_error {
public:
  using handler_error::handler_error;
};

/// A failure that retrying cannot fix: the command goes straight to the
/// troubleshooting queue (no reply).
class permanent_command_error : public handler_error {
public:
  using handler_error::handler_error;
};

/// A business rule rejected the command: terminal status FAILED and a
/// FAILED reply to reply_to (docs/design.md, "Reply format"); no retry, no
/// TSQ.
class business_rule_error : public handler_error {
public:
  using handler_error::handler_error;
};

} // namespace cmdbus
