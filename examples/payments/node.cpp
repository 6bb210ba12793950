// payments-node: a handler node of its own. It runs the Debit handler for
// workers that connect to it (their `--remote-pool`), never touches the
// database, and takes the same settings as `cmdbus node` (run it with
// --help): a config file (--config FILE, see deploy/node.ini), the
// CMDBUS_NODE_* environment and the options --domain, --concurrency,
// --listen, --port-file, --name, --heartbeat, the --tls-* certificates and
// --dump-config.

#include <string>

#include <cmdbus/cli/node_main.hpp>

#include "debit.hpp"
#include "payment.hpp"

int main(int argc, char** argv) {
  cmdbus::node_program program;
  program.name = "payments-node";
  program.description
    = "Runs the payments domains' Debit handler for the workers that\n"
      "connect to it; they keep every side effect in their database.";
  program.register_domain = [](const std::string& domain,
                               cmdbus::handler_registry& handlers,
                               const std::string&) {
    handlers.add(domain, payments::debit_type, payments::debit);
  };
  return cmdbus::node_main(argc, argv, program);
}
