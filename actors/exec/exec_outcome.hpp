#pragma once

// What a program run means for its command (docs/exec.md, "Exit statuses"):
// exit 0 is success with standard output as the result, 75 (EX_TEMPFAIL) a
// transient failure, 65 (EX_DATAERR) a business rule failure, any other
// status a permanent failure; a timeout, a cancel or a signal is transient,
// a program that cannot be started permanent. A failure may name its code
// and message in a JSON error document.

#include <string>

#include "cmdbus/actors/exec/spawn_process.hpp"
#include "cmdbus/model/json.hpp"

namespace cmdbus::exec {

/// The exit status of a transient failure (sysexits' EX_TEMPFAIL).
constexpr int exit_transient = 75;

/// The exit status of a business rule failure (sysexits' EX_DATAERR).
constexpr int exit_business_rule = 65;

/// What the error texts say about the run besides its result.
struct run_description {
  /// The command type and the command line, as configured.
  std::string type;
  std::string command;
  program_limits limits;
};

/// Returns the command's result for a successful run (standard output as
/// JSON; empty output is null), or throws the handler error of a failed
/// one: transient_command_error, permanent_command_error or
/// business_rule_error, with the error document's code, message and
/// details when the program wrote one, else a code of ours (EXEC_...) and
/// the tail of its standard error.
json to_result(const program_result& run, const run_description& what);

} // namespace cmdbus::exec
