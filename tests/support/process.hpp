#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cmdbus::test {

/// What a finished child process produced.
struct process_result {
  /// Exit code, or 128 + signal number when killed by a signal.
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// Runs `argv` (argv[0] is a path) with the current environment plus
/// `env_overrides` ("NAME=value"; "NAME=" alone removes NAME), waits for it
/// and returns its exit code and output. Standard input is `input` (then
/// end of file), or /dev/null without it.
process_result
run_process(const std::vector<std::string>& argv,
            const std::vector<std::string>& env_overrides = {},
            const std::optional<std::string>& input = std::nullopt);

/// Runs the `cmdbus` binary under test with `args`. The caller's CMDBUS_*
/// settings and libpq environment (PGHOST, ...) are removed, so that only
/// what a test passes counts; `env` ("NAME=value") sets variables on top.
/// `input`, if given, is its standard input.
process_result
run_cmdbus(const std::vector<std::string>& args,
           const std::vector<std::string>& env = {},
           const std::optional<std::string>& input = std::nullopt);

/// Whether a child died of a signal or of an uncaught exception instead of
/// exiting with one of its exit codes.
bool crashed(const process_result& r);

/// The CPU time (user plus system, in seconds) that process `pid` has used
/// so far, from /proc/PID/stat; none when it cannot be read (no such
/// process). For bounds on what a process consumes while it should idle.
std::optional<double> cpu_seconds(int pid);

/// The state letter of process `pid` in /proc/PID/stat (R running, S
/// sleeping, T stopped, Z zombie, ...); 0 when there is no such process.
char process_state(int pid);

/// Returns the number of lines (newline characters) of `text`.
size_t line_count(const std::string& text);

/// Returns the last line of `text` without its newline (trailing empty
/// lines are skipped).
std::string last_line(const std::string& text);

} // namespace cmdbus::test
