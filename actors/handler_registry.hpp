#pragma once

// Handler registration for the worker (no CAF includes: applications
// include this to register their handlers).

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/outcome.hpp"

namespace cmdbus {

/// Raised when a (domain, command_type) gets a second handler.
class handler_already_registered_error : public command_bus_error {
public:
  handler_already_registered_error(const std::string& domain,
                                   const std::string& type)
    : command_bus_error("a handler for " + domain + "/" + type
                        + " is already registered") {
    // nop
  }
};

/// What a handler sees besides its command. The context owns what it
/// refers to, so a handler may hand it to another thread; the delivery ends
/// when the handler returns, and extend_visibility throws after that.
class handler_context {
public:
  /// Extends this delivery's visibility timeout by `seconds` from now.
  using extender = std::function<void(std::chrono::seconds)>;

  handler_context(std::shared_ptr<const received_command> rc, extender extend,
                  std::shared_ptr<const std::atomic<bool>> cancelled)
    : rc_(std::move(rc)), extend_(std::move(extend)),
      cancelled_(std::move(cancelled)) {
    // nop
  }

  /// Returns the command being handled.
  const command& cmd() const noexcept {
    return rc_->cmd;
  }

  /// Returns the 1-based attempt number of this delivery.
  int attempt() const noexcept {
    return rc_->attempt;
  }

  /// Returns the command's max_attempts.
  int max_attempts() const noexcept {
    return rc_->max_attempts;
  }

  /// Returns the PGMQ message id of this delivery.
  int64_t msg_id() const noexcept {
    return rc_->msg_id;
  }

  /// Keeps the message invisible for `seconds` more from now (pgmq.set_vt);
  /// long handlers also get an automatic lease heartbeat. A blocking
  /// handler waits for the database and gets `command_bus_error` when it
  /// cannot be reached. A non-blocking handler never waits: the extension
  /// is queued and this returns at once (a failure is logged by the
  /// worker; the heartbeat still covers the delivery). Throws
  /// `command_bus_error` once the delivery has ended.
  void extend_visibility(std::chrono::seconds seconds) const {
    extend_(seconds);
  }

  /// Returns whether the worker is shutting down; long handlers should
  /// finish early (throwing a transient error lets the command run again).
  bool cancelled() const noexcept {
    return cancelled_->load();
  }

private:
  std::shared_ptr<const received_command> rc_;
  extender extend_;
  std::shared_ptr<const std::atomic<bool>> cancelled_;
};

/// A command handler: returns the result (null for none) or throws
/// transient_command_error, permanent_command_error or business_rule_error;
/// any other exception counts as transient with the exception's type name
/// as error code (like the reference library). Where it runs depends on its
/// handler_mode.
using handler_fn = std::function<json(const command&, handler_context&)>;

/// Where the worker runs a handler.
enum class handler_mode {
  /// On a thread of its own (one per handler slot): the handler may block
  /// on I/O, locks or sleeps. The default.
  blocking,
  /// On the worker's shared scheduler threads, without a thread switch per
  /// command: for handlers that never block (computation, in-memory work).
  /// Cheaper per command; a handler that blocks here stalls other work of
  /// the worker, including its database actors' bookkeeping.
  non_blocking,
};

/// The handlers of a worker, by (domain, command_type).
class handler_registry {
public:
  /// Registers `fn`, run in `mode`; throws handler_already_registered_error
  /// for a second handler of the same (domain, command_type).
  void add(const std::string& domain, const std::string& command_type,
           handler_fn fn, handler_mode mode = handler_mode::blocking);

  /// Returns the handler, or nullptr.
  const handler_fn* find(const std::string& domain,
                         const std::string& command_type) const;

  /// Returns the mode of the handler of (domain, command_type); a command
  /// without a handler fails at once, in either mode, so this returns the
  /// mode of any handler of `domain` then (blocking when it has none).
  handler_mode mode(const std::string& domain,
                    const std::string& command_type) const;

  /// Returns whether `domain` needs handlers of `mode`: a domain without
  /// registered handlers uses blocking ones.
  bool uses(const std::string& domain, handler_mode mode) const;

  /// Returns the registered (domain, command_type) pairs.
  std::vector<std::pair<std::string, std::string>> keys() const;

  /// Runs the handler for `rc` and classifies the result; never throws.
  /// A missing handler is a transient failure (HandlerNotFoundError).
  outcome run(const received_command& rc, handler_context& ctx) const;

private:
  struct entry {
    handler_fn fn;
    handler_mode mode;
  };
  std::map<std::pair<std::string, std::string>, entry> handlers_;
};

} // namespace cmdbus
