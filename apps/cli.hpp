#pragma once

// Shared pieces of the `cmdbus` command-line tool: argument parsing, exit
// codes and output helpers. Only apps/ includes this.

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace cmdbus::cli {

// -- exit codes (documented in --help and README) ----------------------------

constexpr int exit_ok = 0;
constexpr int exit_usage = 1;
constexpr int exit_not_found = 2;
constexpr int exit_db_unavailable = 3;
constexpr int exit_failed = 4;

/// A usage error: one line on stderr, exit code 1.
struct usage_error {
  std::string message;
};

/// A "not found" or "duplicate" outcome: one line on stderr, exit code 2.
struct not_found {
  std::string message;
};

/// Parsed command line of one subcommand: positional arguments and
/// `--name value` / `--name=value` options; flags have no value.
class args {
public:
  /// Parses `argv`; `flags` lists options without a value, `options` those
  /// with one. Unknown options are usage errors.
  args(const std::vector<std::string>& argv,
       const std::vector<std::string>& flags,
       const std::vector<std::string>& options);

  /// Returns the positional arguments.
  const std::vector<std::string>& positional() const noexcept {
    return positional_;
  }

  /// Returns whether the flag was given.
  bool flag(const std::string& name) const;

  /// Returns the option's value, if given.
  std::optional<std::string> option(const std::string& name) const;

  /// Returns the option as a positive integer; usage error otherwise.
  std::optional<int> int_option(const std::string& name, int min_value) const;

  /// Throws usage_error unless exactly `n` positional arguments were given.
  void expect_positional(size_t n, const std::string& usage) const;

  /// Returns the DSN: --dsn, else $CMDBUS_DSN, else "" (libpq environment).
  std::string dsn() const;

private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> flags_;
};

// -- log level ---------------------------------------------------------------

/// Removes every `--log-level LEVEL` or `--log-level=LEVEL` from `argv`, a
/// global option that may stand before or after the command's name, and
/// returns the last LEVEL. Throws usage_error for a missing value.
std::optional<std::string> take_log_level(std::vector<std::string>& argv);

/// Sets the level of the "cmdbus" logger for `command`: `given` (from
/// --log-level), else $CMDBUS_LOG_LEVEL, else $SPDLOG_LEVEL, else info for
/// `worker` (its start, stop, recovery and batch lines show) and warn for the
/// other commands. Throws usage_error, naming the choices, for an unknown
/// level from the command line or the environment.
void set_log_level(const std::string& command,
                   const std::optional<std::string>& given);

/// Escapes a string for JSON output.
std::string json_string(const std::string& s);

/// Prints rows as an aligned text table with a header.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

// -- subcommands (each returns an exit code) ---------------------------------

int run_migrate(const std::vector<std::string>& argv);
int run_send(const std::vector<std::string>& argv);
int run_send_batch(const std::vector<std::string>& argv);
int run_show(const std::vector<std::string>& argv);
int run_list(const std::vector<std::string>& argv);
int run_queues(const std::vector<std::string>& argv);
int run_worker(const std::vector<std::string>& argv);

} // namespace cmdbus::cli
