#pragma once

// The main() of every cmdbus program: the `cmdbus` tool and the worker and
// node programs (worker_main, node_main). It takes the log options, runs the
// program and turns what it throws into an exit code and one line of
// message (cli/failure.hpp). Private: not installed.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/config/options.hpp"

namespace cmdbus::cli {

/// --log-level, which every program takes before or after anything else.
inline constexpr config::option log_level_option{
  "--log-level", "LEVEL",
  "trace, debug, info, warn, error, critical or off (default: "
  "$CMDBUS_LOG_LEVEL, else $SPDLOG_LEVEL, else info for a worker or a node, "
  "which then log their start, stop, outages, recoveries and completed "
  "batches, and warn for the other commands); the log goes to stderr"};

/// --log-format, which every program takes before or after anything else.
inline constexpr config::option log_format_option{
  "--log-format", "FORMAT",
  "text, json (one JSON object per line: time, level, logger, actor, "
  "domain, message) or journal (for journald: a <N> priority prefix, the "
  "origin, the message, no time); default $CMDBUS_LOG_FORMAT, else text"};

/// What program_main hands a program's run, and what the run tells it.
class program_context {
public:
  /// The arguments, without the log options.
  std::vector<std::string> args;

  /// The program whose help a usage error points to: "(see `HELP_OF
  /// --help`)". program_main's `program` unless the run names another
  /// (the tool: "cmdbus send").
  std::string help_of;

  /// Sets the level of the "cmdbus" logger for `command` (the log options
  /// taken, else $CMDBUS_LOG_LEVEL, else $SPDLOG_LEVEL, else info for
  /// `worker` and `node` and warn for the others) and its format (else
  /// $CMDBUS_LOG_FORMAT, else text). Throws usage_error, naming the
  /// choices, for an unknown level or format.
  void start_logging(const std::string& command) const;

private:
  friend int program_main(int argc, char** argv, const std::string& program,
                          const std::function<int(program_context&)>& run);

  std::optional<std::string> level_;
  std::optional<std::string> format_;
};

/// Runs a program: takes every --log-level and --log-format from the
/// arguments (before any `--`), runs `run`, and turns what it throws into an
/// exit code reported under `program`'s name: with --json (before any `--`)
/// as JSON on standard output, else as one line on standard error, a usage
/// error with the hint "(see `HELP_OF --help`)". Never throws.
int program_main(int argc, char** argv, const std::string& program,
                 const std::function<int(program_context&)>& run);

/// The same for a program of one's own (worker_main, node_main): logging
/// starts as for `command`, and --version (before any `--`) prints
/// "PROGRAM (cmdbus VERSION)".
int program_main(
  int argc, char** argv, const std::string& program, const std::string& command,
  const std::function<int(const std::vector<std::string>&)>& run);

/// Returns whether standard output is a terminal (for bars, --watch and
/// progress lines).
bool stdout_is_terminal();

} // namespace cmdbus::cli
