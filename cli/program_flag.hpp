#pragma once

// A flag of a worker or node program of one's own (cli/worker_main.hpp,
// cli/node_main.hpp), besides the common options.

#include <string>

namespace cmdbus {

/// A flag (an option without a value) that a program takes besides the
/// common options, such as the tool's `--demo`. worker_main and node_main
/// list it with the options of --help and accept it anywhere on the command
/// line; the program reads it from its own `argv` before calling them.
struct program_flag {
  /// "--demo".
  std::string name;
  /// Its help text.
  std::string help;
};

} // namespace cmdbus
