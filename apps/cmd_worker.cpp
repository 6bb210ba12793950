// `cmdbus worker`: the common worker program (cli/worker_main.hpp) with the
// demo handlers, which it serves only when asked to with --demo: a real
// domain needs a worker that has its handlers (see examples/payments).

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/command_api.hpp"
#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/demo_handlers.hpp"
#include "apps/demo_workflows.hpp"
#include "cmdbus/cli/worker_main.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::cli {

namespace {

/// The command API beside the worker (--api, [api]): the worker's DSN and
/// pooler, its [tls] set, tokens from --api-tokens-file or
/// $CMDBUS_API_TOKENS.
std::shared_ptr<void> serve_api(const config::worker_config& cfg) {
  api::api_settings s;
  s.listen = config::parse_http_address(cfg.api.listen);
  try {
    s.tokens = api::token_store::load(
      cfg.api.tokens_file, std::getenv,
      "--api-tokens-file PATH (mode 600; [api] tokens-file, "
      "$CMDBUS_API_TOKENS_FILE) or $CMDBUS_API_TOKENS");
  } catch (const std::invalid_argument& e) {
    throw usage_error{e.what()};
  }
  s.threads = static_cast<size_t>(cfg.api.threads);
  s.connections = static_cast<size_t>(cfg.api.connections);
  s.dsn = cfg.dsn;
  s.pooler = cfg.pooler;
  s.tls = cfg.tls;
  return std::make_shared<api::command_api>(std::move(s));
}

} // namespace

int run_worker(const std::vector<std::string>& argv) {
  // --demo is this tool's own flag: the common worker accepts it (as the
  // program's flag) and lists it in --help.
  bool demo = has_flag(argv, "--demo");
  worker_program program;
  program.name = "cmdbus worker";
  program.flags = {{"--demo", "serve the demo handlers (see above)"}};
  program.description
    = "With --demo it runs the demo handlers in every domain it serves: the\n"
      "command type `Test` (driven by data.behavior) and the process type\n"
      "`DemoOrder` (replies on DOMAIN__process_replies; see `cmdbus "
      "process`).\n"
      "With --exec TYPE=COMMAND (or [domains.NAME.exec] in the config file)\n"
      "it runs a program of any language for each command of TYPE: the\n"
      "command as JSON on its standard input, the result on its standard\n"
      "output, the outcome by its exit status (docs/exec.md).\n"
      "Without --demo or --exec it has no handlers, so it refuses to start:\n"
      "a real domain needs programs (--exec) or a worker built with its own\n"
      "handlers (cmdbus::worker_main, see examples/payments), since this one\n"
      "would fail every command with HandlerNotFoundError and use up its\n"
      "attempts. With --remote-pool it starts anyway: the handler nodes\n"
      "(`cmdbus node`) run the commands.";
  program.no_handlers_hint
    = "give its command types programs with --exec TYPE=COMMAND (see "
      "docs/exec.md), or build a worker of your own with its handlers "
      "(cmdbus::worker_main, see examples/payments); --demo serves the demo "
      "handlers";
  if (demo)
    program.register_domain = [](const std::string& domain,
                                 handler_registry& handlers,
                                 process_registry& processes) {
      demo::register_test_handler(handlers, domain);
      demo::register_demo_workflows(processes, domain);
    };
  // Operators see batch completions in the log. Having a callback also
  // makes the worker record them for durable delivery (V005).
  program.serve_api = serve_api;
  program.on_worker = [](worker& w) {
    w.on_batch_complete([](const std::string& domain, const uuid& batch_id) {
      log::log_from({"worker", domain}, spdlog::level::info,
                    "batch {} of domain {} is complete", batch_id.to_string(),
                    domain);
    });
  };
  return cmdbus::run_worker(argv, program);
}

} // namespace cmdbus::cli
