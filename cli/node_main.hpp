#pragma once

// A handler node program of one's own: `main()` registers the application's
// handlers, and node_main() does the rest exactly as `cmdbus node` does it:
// the settings from --config FILE, CMDBUS_NODE_* / CMDBUS_TLS_* and the
// command line (config/node_config.hpp), --help, --dump-config, the port
// file, SIGINT/SIGTERM, the log options and the exit codes.
//
//   int main(int argc, char** argv) {
//     cmdbus::node_program program;
//     program.name = "fraud-node";
//     program.register_domain = [](const std::string& domain,
//                                  cmdbus::handler_registry& handlers,
//                                  const std::string& node_name) {
//       handlers.add(domain, "FraudCheck", fraud_check);
//     };
//     return cmdbus::node_main(argc, argv, program);
//   }
//
// A handler node never opens a database connection (actors/node.hpp).

#include <functional>
#include <string>
#include <vector>

#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/cli/program_flag.hpp"

namespace cmdbus {

/// What a node program adds to the common node: its name and handlers.
struct node_program {
  /// The program's name, in the usage line, in `--version` and in front of
  /// error messages.
  std::string name = "cmdbus node";

  /// A paragraph of help text about what the program serves (may be
  /// empty).
  std::string description;

  /// Called once per configured domain before the node starts: registers
  /// the domain's handlers. `node_name` is --name (or $CMDBUS_NODE_NAME),
  /// else the host name. A domain without handlers is refused (exit code 1).
  std::function<void(const std::string& domain, handler_registry& handlers,
                     const std::string& node_name)>
    register_domain;

  /// Optional: added to the refusal of a domain without handlers.
  std::string no_handlers_hint;

  /// Optional: the program's own flags (see program_flag).
  std::vector<program_flag> flags;
};

/// Runs a node program: the log options (--log-level, --log-format),
/// --json, --version, --help and --dump-config, then everything `cmdbus
/// node` does.
/// Returns the exit code (0 ok, 1 usage error or invalid setting, 4 cannot
/// listen or cannot load the certificates). Never throws.
int node_main(int argc, char** argv, const node_program& program);

/// The same for a tool that has already taken the log options: `args` are
/// the arguments after the command's name. Returns the exit code; throws
/// what node_main turns into exit codes.
int run_node(const std::vector<std::string>& args, const node_program& program);

} // namespace cmdbus
