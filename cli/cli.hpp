#pragma once

// Shared pieces of the `cmdbus` command-line tool and of worker programs
// (cli/worker_main.hpp): argument parsing, exit codes, connections, the
// mapping of failures to exit codes and output helpers. Private: not
// installed.

#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cmdbus/config/network_config.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::cli {

// -- exit codes (documented in --help, docs/cli.md and the README) -----------

constexpr int exit_ok = 0;
/// Usage error or invalid input.
constexpr int exit_usage = 1;
/// Not found, duplicate, or not in the state the operation needs (e.g. a
/// command that is not in the troubleshooting queue).
constexpr int exit_not_found = 2;
/// The database server cannot be reached or the connection broke.
constexpr int exit_db_unavailable = 3;
/// Any other failure (a failed migration, a database without our schema).
constexpr int exit_failed = 4;
/// The commands did not all complete: `wait` saw FAILED, CANCELED or the
/// troubleshooting queue; `worker --tick` left commands in the
/// troubleshooting queue or due for another attempt.
constexpr int exit_incomplete = 5;
/// The server refused the login: wrong password, unknown role, or a
/// database that does not exist.
constexpr int exit_auth = 6;
/// A wait ended at its --timeout before the awaited state.
constexpr int exit_timeout = 7;

/// What the tools say for a database that was never migrated (exit 4).
constexpr const char* never_migrated
  = "the database has no cmdbus schema (it was never migrated): run `cmdbus "
    "migrate` first";

/// A usage error: one line on stderr, exit code 1. `main` appends the hint
/// "(see `cmdbus CMD --help`)" once; messages do not carry it themselves.
struct usage_error {
  std::string message;
};

/// A "not found", "duplicate" or "wrong state" outcome: exit code 2.
struct not_found {
  std::string message;
};

/// A failure with its own exit code and message (e.g. exit_incomplete).
struct exit_with {
  int code;
  std::string message;
};

/// Parsed command line of one subcommand: positional arguments and
/// `--name value` / `--name=value` options; flags have no value. `--` ends
/// the options: every argument after it is positional.
class args {
public:
  /// Parses `argv`; `flags` lists options without a value, `options` those
  /// with one. An unknown option is a usage error that names the nearest
  /// known one.
  args(const std::vector<std::string>& argv,
       const std::vector<std::string>& flags,
       const std::vector<std::string>& options);

  /// Returns the positional arguments.
  const std::vector<std::string>& positional() const noexcept {
    return positional_;
  }

  /// Returns whether the flag was given.
  bool flag(const std::string& name) const;

  /// Returns the option's value, if given (the last one when repeated).
  std::optional<std::string> option(const std::string& name) const;

  /// Returns every value given for a repeatable option, in order.
  std::vector<std::string> options(const std::string& name) const;

  /// Returns the option as an integer >= `min_value`; usage error otherwise.
  std::optional<int> int_option(const std::string& name, int min_value) const;

  /// Returns the option as a duration (see `parse_duration`).
  std::optional<std::chrono::milliseconds>
  duration_option(const std::string& name) const;

  /// Throws usage_error unless exactly `n` positional arguments were given;
  /// `usage` names them ("DOMAIN and COMMAND_ID").
  void expect_positional(size_t n, const std::string& usage) const;

  /// Returns the DSN: --dsn, else $CMDBUS_DSN, else "" (libpq environment).
  std::string dsn() const;

  /// Sets the files of `tls` that --tls-certificate, --tls-key,
  /// --tls-ca-file and --tls-ca-path give (the others stay).
  void apply_tls_files(config::tls_config& tls) const;

private:
  std::vector<std::string> positional_;
  std::multimap<std::string, std::string> values_;
  std::vector<std::string> flags_;
};

/// A command with subcommands (`tsq list ...`): the subcommand's name ("" when
/// none is given; "--help" for a help request before it) and its arguments,
/// which include the options that stood before the subcommand (`cmdbus tsq
/// --dsn DSN list ...`).
struct subcommand {
  std::string name;
  std::vector<std::string> argv;
};

/// Splits `argv` of a command with subcommands.
subcommand take_subcommand(const std::vector<std::string>& argv);

/// Throws usage_error for an unknown subcommand `name` of `command`, naming
/// the nearest of `known`; for a missing one, listing them.
[[noreturn]] void unknown_subcommand(const std::string& command,
                                     const std::string& name,
                                     const std::vector<std::string>& known);

/// Returns the candidate `given` abbreviates, when it abbreviates exactly
/// one; else the candidate nearest to it (edit distance at most a third of
/// its length, at least 2); else "".
std::string nearest(const std::string& given,
                    const std::vector<std::string>& candidates);

// -- values ------------------------------------------------------------------

/// Parses a UUID argument; usage error naming `what` otherwise.
uuid parse_uuid_arg(const std::string& what, const std::string& text);

/// Parses a JSON argument: the text itself, `@FILE` for a file's content, or
/// `-` for standard input. Usage error naming `what` for unreadable input or
/// invalid JSON.
json parse_json_arg(const std::string& what, const std::string& text);

/// Like `parse_json_arg`, and the value must be an object.
json parse_object_arg(const std::string& what, const std::string& text);

/// Parses a command status, case-insensitively ("tsq" names
/// IN_TROUBLESHOOTING_QUEUE); usage error listing the choices otherwise.
command_status parse_status_arg(const std::string& what,
                                const std::string& text);

/// Parses a batch status, case-insensitively; usage error otherwise.
batch_status parse_batch_status_arg(const std::string& what,
                                    const std::string& text);

/// Parses a duration: a number with unit ms, s, m, h or d ("90s", "15m",
/// "1.5h"); a bare number is seconds. Usage error naming `what` otherwise.
std::chrono::milliseconds parse_duration(const std::string& what,
                                         const std::string& text);

// -- database ----------------------------------------------------------------

/// Pool settings of a one-shot command: the DSN from `a`, up to `max_size`
/// connections, no reconnect backoff log (the one failure is the command's
/// error).
db::pool_options pool_options_for(const args& a, size_t max_size = 2);

/// Throws not_found, naming `--create`, unless the PGMQ queue exists; with
/// `create`, creates it instead. For commands that would otherwise create a
/// queue from a mistyped domain.
void require_queue(db::pool& pool, const std::string& queue, bool create);

/// For a listing that came out empty: says on stderr when DOMAIN has no
/// command queue, since a mistyped domain otherwise looks like a quiet one.
void note_if_unknown_domain(db::pool& pool, const std::string& domain);

// -- log level ---------------------------------------------------------------

/// Removes every `--log-level LEVEL` or `--log-level=LEVEL` from `argv`, a
/// global option that may stand before or after the command's name, and
/// returns the last LEVEL. Throws usage_error for a missing value.
std::optional<std::string> take_log_level(std::vector<std::string>& argv);

/// Sets the level of the "cmdbus" logger for `command`: `given` (from
/// --log-level), else $CMDBUS_LOG_LEVEL, else $SPDLOG_LEVEL, else info for
/// `worker` and `node` (their start, stop, recovery, connection and batch
/// lines show) and warn for the other commands. Throws usage_error, naming the choices, for an unknown
/// level from the command line or the environment.
void set_log_level(const std::string& command,
                   const std::optional<std::string>& given);

/// Removes every `--log-format FORMAT` or `--log-format=FORMAT` from `argv`
/// (a global option like --log-level) and returns the last FORMAT. Throws
/// usage_error for a missing value.
std::optional<std::string> take_log_format(std::vector<std::string>& argv);

/// Sets the format of the "cmdbus" logger: `given` (from --log-format),
/// else $CMDBUS_LOG_FORMAT, else text. Throws usage_error, naming the
/// choices, for an unknown format.
void set_log_format(const std::optional<std::string>& given);

// -- failures ----------------------------------------------------------------

/// What a failed command reports: its exit code and one line.
struct failure {
  int code;
  std::string message;
};

/// Maps an exception to its exit code and message: usage_error 1, not_found
/// and the library's "duplicate"/"wrong state" errors 2, an unreachable
/// database 3, a refused login 6 (with advice by its reason), a database
/// without our schema 4 (never_migrated), exit_with its own code, anything
/// else 4.
failure describe_failure(std::exception_ptr ep);

/// Reports `f` (with --json as {"error": ..., "exit_code": N} on standard
/// output, else as "PROGRAM: message" on standard error) and returns its
/// exit code.
int report_failure(const failure& f, const std::string& program, bool json);

/// Removes every `flag` standing before any `--` from `argv`; returns
/// whether there was one (a program's own flag that the common option
/// parser does not know, e.g. the tool's --demo).
bool take_flag(std::vector<std::string>& argv, const std::string& flag);

/// Returns whether `argv` asks for JSON output (--json before any `--`).
bool wants_json(const std::vector<std::string>& argv);

/// The `main()` of a program of one's own (worker_main, node_main): takes
/// the log options (logging at info as `command` does), answers --version
/// as "PROGRAM (cmdbus VERSION)", runs `run` with the remaining arguments
/// and turns what it throws into an exit code reported under `program`'s
/// name (with a pointer to `PROGRAM --help` for usage errors). Never throws.
int program_main(int argc, char** argv, const std::string& program,
                 const std::string& command,
                 const std::function<int(const std::vector<std::string>&)>& run);

// -- text output -------------------------------------------------------------

/// Prints rows as an aligned text table with a header.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

/// Prints `name value` pairs with the values aligned.
void print_fields(std::ostream& out,
                  const std::vector<std::pair<std::string, std::string>>& rows);

/// Prints a command's help text followed by the exit codes every command
/// shares (3, 4 for a database without the schema, 6).
void print_help(const char* text);

/// Returns whether standard output is a terminal (for bars and --watch).
bool stdout_is_terminal();

// -- subcommands (each returns an exit code) ---------------------------------

int run_migrate(const std::vector<std::string>& argv);
int run_send(const std::vector<std::string>& argv);
int run_send_batch(const std::vector<std::string>& argv);
int run_show(const std::vector<std::string>& argv);
int run_list(const std::vector<std::string>& argv);
int run_queues(const std::vector<std::string>& argv);
int run_worker(const std::vector<std::string>& argv);
int run_node(const std::vector<std::string>& argv);
int run_cluster(const std::vector<std::string>& argv);
int run_tsq(const std::vector<std::string>& argv);
int run_batch(const std::vector<std::string>& argv);
int run_stats(const std::vector<std::string>& argv);
int run_replies(const std::vector<std::string>& argv);
int run_wait(const std::vector<std::string>& argv);
int run_process(const std::vector<std::string>& argv);

} // namespace cmdbus::cli
