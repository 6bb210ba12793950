#pragma once

// The errors the worker's actors answer each other with, as a CAF error
// category ("cmdbus"), and the one mapping from such an error back to the
// exception a handler sees.

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace cmdbus::actors {

/// Why an actor could not answer a request.
enum class ec : uint8_t {
  /// Not an error.
  none = 0,
  /// The database could not be reached or did not answer in time (the
  /// request may succeed later).
  db_unavailable,
  /// The database refused the statement.
  db_failed,
  /// A handler (or an application's handler actor) failed or did not
  /// answer.
  handler_failed,
  /// A writer held side effects and made no progress for too long while the
  /// database answered: the supervisor ends its domain with this reason,
  /// and the root restarts the domain.
  writer_stuck,
  /// A worker and a handler node speak different protocol versions (both
  /// log it; the text says both versions).
  protocol_mismatch,
  /// A handler node does not serve the domain a worker asked for.
  unknown_domain,
  /// A remote node could not be reached, refused the connection (TLS,
  /// application identifier, interface) or went away.
  remote_unavailable,
  /// The request is not supported by this kind of process.
  unsupported,
};

/// The error category of `ec`.
constexpr caf::atom_value ec_category = caf::atom("cmdbus");

/// Returns the name of `x` ("db_unavailable", ...).
std::string to_string(ec x);

/// Registers the "cmdbus" error category with `cfg`, so that
/// `to_string(error)` names the code.
void add_error_category(caf::actor_system_config& cfg);

/// Returns the text of `err`: the message it carries when it is one of
/// ours (or CAF's with a text), else to_string(err).
std::string describe(const caf::error& err);

/// Throws the exception a handler sees for the error answer `err` to a
/// request it made: transient_command_error HANDLER_ACTOR_UNAVAILABLE for
/// ec::handler_failed (an application's handler actor failed, so the command
/// runs again), else command_bus_error; the text is "<what>: <describe(err)>".
[[noreturn]] void throw_error(const caf::error& err, const std::string& what);

} // namespace cmdbus::actors

CAF_ERROR_CODE_ENUM(cmdbus::actors::ec, "cmdbus")
