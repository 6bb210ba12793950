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

} // namespace cmdbus::test
