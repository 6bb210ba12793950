#pragma once

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
/// and returns its exit code and output. Standard input is /dev/null.
process_result run_process(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env_overrides = {});

/// Runs the `cmdbus` binary under test with `args`. The caller's CMDBUS_*
/// settings and libpq environment (PGHOST, ...) are removed, so that only
/// what a test passes counts; `env` ("NAME=value") sets variables on top.
process_result run_cmdbus(const std::vector<std::string>& args,
                          const std::vector<std::string>& env = {});

} // namespace cmdbus::test
