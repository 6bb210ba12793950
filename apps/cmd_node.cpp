// `cmdbus node`: the common handler node program (cli/node_main.hpp) with the
// demo handlers, which it serves only when asked to with --demo: a real
// domain needs a node built with its own handlers (cmdbus::node_main).

#include <string>
#include <vector>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/demo_handlers.hpp"
#include "cmdbus/cli/node_main.hpp"

namespace cmdbus::cli {

int run_node(const std::vector<std::string>& argv) {
  // --demo is this tool's own flag: the common node accepts it (as the
  // program's flag) and lists it in --help.
  bool demo = has_flag(argv, "--demo");
  node_program program;
  program.name = "cmdbus node";
  program.flags = {{"--demo", "serve the demo handler (see above)"}};
  program.description
    = "With --demo it runs the demo handler in every domain it serves: the\n"
      "command type `Test` (driven by data.behavior; its result says\n"
      "\"served_by\": the node's name). Without --demo it has no handlers, so\n"
      "it refuses to start: a real domain needs a node built with its own\n"
      "handlers (cmdbus::node_main).";
  program.no_handlers_hint
    = "cmdbus node serves only the demo handler, with --demo; for a real "
      "domain build a node of your own with its handlers (cmdbus::node_main)";
  if (demo)
    program.register_domain = [](const std::string& domain,
                                 handler_registry& handlers,
                                 const std::string& node_name) {
      demo::register_test_handler(handlers, domain, node_name);
    };
  return cmdbus::run_node(argv, program);
}

} // namespace cmdbus::cli
