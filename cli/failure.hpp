#pragma once

// How a cmdbus program fails: its exit codes, the exceptions that carry
// them, and the mapping of any exception to an exit code and one line of
// message (with advice for the database's failures). Shared by the `cmdbus`
// tool and the worker and node programs (cli/worker_main.hpp,
// cli/node_main.hpp). Private: not installed.

#include <exception>
#include <string>

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
/// `worker --tick`: a budget ([tick] max-duration, runner-max-duration,
/// runner-max-items) cut the run short; work may be left for the next run.
constexpr int exit_budget = 8;

/// What the programs say for a database that was never migrated (exit 4).
constexpr const char* never_migrated
  = "the database has no cmdbus schema (it was never migrated): run `cmdbus "
    "migrate` first";

// -- what a command throws ---------------------------------------------------

/// A usage error: one line on stderr, exit code 1. program_main appends the
/// hint "(see `PROGRAM --help`)" once; messages do not carry it themselves.
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

// -- reporting ---------------------------------------------------------------

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

/// Reports `f` (with `json` as {"error": ..., "exit_code": N} on standard
/// output, else as "PROGRAM: message" on standard error) and returns its
/// exit code.
int report_failure(const failure& f, const std::string& program, bool json);

} // namespace cmdbus::cli
