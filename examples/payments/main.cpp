// payments-worker: a worker program of its own. It serves the payments
// domains with its handlers and takes the same config file, environment
// and flags as `cmdbus worker` (run it with --help), including --http for
// /healthz, /readyz, /metrics and the status page.

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <cmdbus/actors/actor_handler.hpp>
#include <cmdbus/cli/worker_main.hpp>

#include "debit.hpp"
#include "fraud_check.hpp"
#include "payment.hpp"

int main(int argc, char** argv) {
  // The application's own actor system, for its own actors. (The worker
  // runs its machinery in an actor system of its own.)
  caf::actor_system_config caf_config;
  caf::actor_system system{caf_config};
  auto fraud = system.spawn(payments::fraud_check);

  cmdbus::worker_program program;
  program.name = "payments-worker";
  program.description
    = "Serves the payments domains: Debit (a function), FraudCheck (an\n"
      "actor) and the Payment process (Debit, then FraudCheck; a refused\n"
      "check reverses the Debit).";
  program.register_domain = [&](const std::string& domain,
                                cmdbus::handler_registry& handlers,
                                cmdbus::process_registry& processes) {
    handlers.add(domain, payments::debit_type, payments::debit);
    cmdbus::add_actor_handler(handlers, domain, payments::fraud_check_type,
                              system, fraud, std::chrono::seconds{10});
    processes.add(domain, payments::payment_workflow());
  };
  auto code = cmdbus::worker_main(argc, argv, program);
  // The actor system waits for its actors when it ends.
  caf::anon_send_exit(fraud, caf::exit_reason::user_shutdown);
  return code;
}
