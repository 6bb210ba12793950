#pragma once

// The help texts of a worker and of a handler node: hand-written prose
// around an "Options:" block generated from the settings table (and from a
// program's own options). Internal to the libraries.

#include <string>
#include <vector>

#include "cmdbus/config/options.hpp"

namespace cmdbus::config::detail {

/// What a program adds to the help of its settings.
struct program_help {
  /// Replaces "cmdbus worker" ("cmdbus node") in the usage line.
  std::string name;
  /// A paragraph about what the program serves, above the options; may be
  /// empty.
  std::string description;
  /// The program's own options, listed before -h, --help.
  std::vector<option> options;
  /// Appended at the end (the program's exit codes).
  std::string epilogue;
};

/// The help of a worker program.
std::string worker_help(const program_help& program);

/// The help of a handler node program.
std::string node_help(const program_help& program);

} // namespace cmdbus::config::detail
