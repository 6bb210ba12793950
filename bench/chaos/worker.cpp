// cmdbus-chaos-worker: the worker of the harness's `nodes` scenario. It is
// `cmdbus worker --demo` without the demo `Test` handler: the DemoOrder
// process type in every domain it serves, and no command handler at all,
// so that every `Test` command (the load's and the processes' steps) runs
// on the handler nodes given with --remote-pool (`cmdbus node --demo`).
// Settings, exit codes and logs are those of every worker program.

#include <string>

#include "apps/demo_workflows.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/cli/worker_main.hpp"

int main(int argc, char** argv) {
  cmdbus::worker_program program;
  program.name = "cmdbus-chaos-worker";
  program.description
    = "The fault harness's worker with remote handler pools: the demo\n"
      "process type DemoOrder in every domain, and no command handler, so\n"
      "that every `Test` command runs on the nodes of --remote-pool.";
  program.register_domain = [](const std::string& domain,
                               cmdbus::handler_registry&,
                               cmdbus::process_registry& processes) {
    cmdbus::demo::register_demo_workflows(processes, domain);
  };
  // Having a batch callback makes the worker record its deliveries, which
  // the harness checks (as with `cmdbus worker`).
  program.on_worker = [](cmdbus::worker& w) {
    w.on_batch_complete([](const std::string&, const cmdbus::uuid&) {});
  };
  return cmdbus::worker_main(argc, argv, program);
}
