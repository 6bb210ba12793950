#pragma once

// The tool's command lines: each command (or subcommand) declares its options
// once, in a command_spec, from which both its parser's list (args) and the
// "Options:" block of its --help are made; the usage line, the description
// and the exit codes around them are written by hand. A worker's and a
// node's settings are read by config/ instead (config/settings.hpp), from
// tables of the same options.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/cli/failure.hpp"
#include "cmdbus/config/options.hpp"

namespace cmdbus::cli {

using config::option;

// -- options most commands share ---------------------------------------------

/// --dsn DSN.
inline constexpr option dsn_option{
  "--dsn", "DSN",
  "connection string (default: $CMDBUS_DSN, then the libpq environment)"};

/// --dsn-file PATH: the DSN from a file of its owner's alone (it may hold
/// the password), instead of --dsn ($CMDBUS_DSN_FILE instead of
/// $CMDBUS_DSN).
inline constexpr option dsn_file_option{
  "--dsn-file", "PATH",
  "read the connection string from PATH, a file only its owner may read "
  "(mode 600), instead of --dsn (default: $CMDBUS_DSN_FILE)"};

/// -h, --help.
inline constexpr option help_option = config::help_option;

/// --delay D: a delayed send (send, send-batch); see not_before_arg.
inline constexpr option delay_option{
  "--delay", "D",
  "send now, run not before D from now (a duration: 90s, 10min, 2h, 1d); "
  "the command is PENDING and invisible to workers until then"};

/// --at T: a delayed send to an absolute time (send, send-batch).
inline constexpr option at_option{
  "--at", "T",
  "send now, run not before T (ISO 8601 with a zone, e.g. "
  "2026-12-01T03:00:00Z or 2026-12-01T04:00:00+01:00); a time in the past "
  "means now"};

// -- commands ----------------------------------------------------------------

/// A command's help around its options; the options are also exactly what
/// its parser accepts.
struct command_spec {
  /// The usage line(s) and the description: the help above the options.
  const char* synopsis;
  /// Every option the command takes, in the order its help lists them.
  std::vector<option> options;
  /// The help below the options: notes, exit codes. May be empty.
  const char* epilogue = "";
  /// Whether the command uses the database: its help then ends with the
  /// exit codes every such command shares (3, 4, 6).
  bool database = true;
};

/// Returns the help of `command`: its synopsis, "Options:" and the options
/// (when it has any), its epilogue, and the database's exit codes when it
/// uses the database.
std::string help_text(const command_spec& command);

/// Prints help_text(command) on standard output; returns exit_ok.
int print_help(const command_spec& command);

/// Parsed command line of one command: positional arguments and `--name
/// value` / `--name=value` options; flags have no value. `--` ends the
/// options: every argument after it is positional.
class args {
public:
  /// Parses `argv` against `options`. An unknown option is a usage error
  /// that names the nearest known one; an option's short name (-h) stands
  /// for its name.
  args(const std::vector<std::string>& argv,
       const std::vector<option>& options);

  /// Parses `argv` against the options of `command`.
  args(const std::vector<std::string>& argv, const command_spec& command)
    : args(argv, command.options) {
    // nop
  }

  /// Returns the positional arguments.
  const std::vector<std::string>& positional() const noexcept {
    return positional_;
  }

  /// Returns whether the flag was given.
  bool flag(const std::string& name) const;

  /// Returns whether --help (or -h) was given.
  bool help() const {
    return flag(std::string{help_option.name});
  }

  /// Returns the option's value, if given (the last one when repeated).
  std::optional<std::string> option(const std::string& name) const;

  /// Returns every value given for a repeatable option, in order.
  std::vector<std::string> options(const std::string& name) const;

  /// Returns the option as an integer >= `min_value`; usage error otherwise.
  std::optional<int> int_option(const std::string& name, int min_value) const;

  /// Returns the option as a duration (see parse_duration).
  std::optional<std::chrono::milliseconds>
  duration_option(const std::string& name) const;

  /// Throws usage_error unless exactly `n` positional arguments were given;
  /// `usage` names them ("DOMAIN and COMMAND_ID").
  void expect_positional(size_t n, const std::string& usage) const;

  /// Returns the DSN: --dsn or the content of --dsn-file's file, else
  /// $CMDBUS_DSN or the content of $CMDBUS_DSN_FILE's file, else "" (the
  /// libpq environment). Throws usage_error when the command line (or the
  /// environment) gives both, or when the file cannot be used
  /// (db::read_dsn_file).
  std::string dsn() const;

private:
  std::vector<std::string> positional_;
  std::multimap<std::string, std::string> values_;
  std::vector<std::string> flags_;
};

/// Returns whether `argv` holds the flag `name` before any `--` (a flag
/// that another parser accepts and ignores, like the tool's --demo of
/// `worker` and `node`).
bool has_flag(const std::vector<std::string>& argv, const std::string& name);

// -- commands with subcommands -----------------------------------------------

/// One subcommand: its name, its options and help, and what runs it.
struct subcommand {
  const char* name;
  const command_spec* spec;
  int (*run)(const args&);
};

/// Runs the subcommand that `argv` names (`batch show ...`): the options
/// that stand before its name count as its own (`cmdbus tsq --dsn DSN list
/// ...`). Without a subcommand it is a usage error listing them; --help
/// (or `help`) before one prints `overview`, after one the subcommand's
/// help. An unknown subcommand is a usage error naming the nearest.
int run_subcommand(const std::string& command,
                   const std::vector<std::string>& argv,
                   const command_spec& overview,
                   const std::vector<subcommand>& subcommands);

} // namespace cmdbus::cli
