#pragma once

// Command handlers that run external programs (`cmdbus worker --exec
// TYPE=COMMAND`, [domains.NAME.exec]; docs/exec.md): each command becomes
// one run of the type's program, its context one JSON document on the
// program's standard input, the run's end its outcome (exec_outcome.hpp).
// The handlers are blocking ones: each runs on its handler slot's own
// thread, never on the actor scheduler's.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/actors/exec/spawn_process.hpp"
#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/config/exec_config.hpp"

namespace cmdbus::exec {

/// How one command type runs as a program.
struct exec_spec {
  /// The command type and its command line, as configured.
  std::string type;
  std::string command;
  /// The command line split into words (config::split_command).
  std::vector<std::string> argv;
  /// The program's whole environment, "NAME=value" each.
  std::vector<std::string> env;
  program_limits limits;
};

/// The JSON document a program reads on its standard input: domain,
/// command_type, command_id, data, attempt, max_attempts, msg_id, and
/// correlation_id and reply_to (null when unset).
std::string input_document(const command& cmd, int attempt, int max_attempts,
                           int64_t msg_id);

/// The environment a program gets: "NAME=value" for each of `names` that
/// `getenv` knows.
std::vector<std::string> pass_environment(
  const std::vector<std::string>& names,
  const std::function<std::optional<std::string>(const char*)>& getenv);

/// A handler that runs `spec`'s program for each command, to its end or
/// its timeout (a stopping worker waits for it like for any handler).
handler_fn make_exec_handler(std::shared_ptr<const exec_spec> spec);

/// Registers a blocking handler in `domain` for each program `cfg` gives it
/// (config::exec_programs_of), with the environment taken from this
/// process's now. Throws handler_already_registered_error for a type that
/// already has a handler, and std::invalid_argument for a command line
/// that does not split (config::validate rejects those first).
void add_exec_handlers(handler_registry& registry,
                       const config::exec_config& cfg,
                       const std::string& domain);

} // namespace cmdbus::exec
