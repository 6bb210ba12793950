#pragma once

// A worker program of one's own: `main()` registers the application's
// handlers and process types, and worker_main() does the rest exactly as
// `cmdbus worker` does it: the settings from --config FILE, CMDBUS_* and the
// command line, --help, --dump-config, --tick, --create, --http, the schema
// and queue checks, SIGINT/SIGTERM, the log options and the exit codes.
//
//   int main(int argc, char** argv) {
//     cmdbus::worker_program program;
//     program.name = "payments-worker";
//     program.register_domain = [](const std::string& domain,
//                                  cmdbus::handler_registry& handlers,
//                                  cmdbus::process_registry& processes) {
//       handlers.add(domain, "Debit", debit);
//     };
//     return cmdbus::worker_main(argc, argv, program);
//   }
//
// No CAF here: a handler that is an actor is registered with
// add_actor_handler (cmdbus/actors/actor_handler.hpp) inside
// register_domain.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/cli/program_flag.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/process/registry.hpp"

namespace cmdbus {

/// What a worker program adds to the common worker: its name, its handlers
/// and process types.
struct worker_program {
  /// The program's name, in the usage line, in `--version` and in front of
  /// error messages ("payments-worker: ...").
  std::string name = "cmdbus worker";

  /// A paragraph of help text about what the program serves, printed by
  /// --help above the options (may be empty).
  std::string description;

  /// Called once per configured domain before the worker starts: registers
  /// the domain's command handlers and process types. A domain that gets
  /// neither is refused (exit code 1) before any database access, since
  /// the worker would fail its commands with HandlerNotFoundError and use
  /// up their attempts.
  std::function<void(const std::string& domain, handler_registry& handlers,
                     process_registry& processes)>
    register_domain;

  /// Optional: called with the worker after it is built and before it
  /// starts (e.g. to set on_batch_complete).
  std::function<void(worker&)> on_worker;

  /// Optional: added to the refusal of a domain without handlers (what to
  /// do instead).
  std::string no_handlers_hint;

  /// Optional: the program's own flags (see program_flag).
  std::vector<program_flag> flags;

  /// Optional: starts the command API beside the worker when the
  /// configuration asks for it ([api] listen, --api; docs/api.md), from
  /// the worker's configuration, just before the worker starts; what it
  /// returns serves until the worker stops, and is released before the
  /// worker stops (waiting clients hear at once). Throws usage_error (no tokens) or std::runtime_error
  /// (cannot listen). `cmdbus worker` sets it; a program without it
  /// refuses a configuration with [api] listen.
  std::function<std::shared_ptr<void>(const config::worker_config& cfg)>
    serve_api;
};

/// Runs a worker program: the log options (--log-level, --log-format), --dsn,
/// --json, --version and --help, then everything `cmdbus worker` does.
/// Returns the exit code (0 ok, 1 usage error or invalid setting, 2 a
/// domain's queue does not exist, 3 database unavailable, 4 other failure,
/// 5 with --tick: not every command completed, 6 login refused, 8 with
/// --tick: a budget cut the run short). Never throws.
int worker_main(int argc, char** argv, const worker_program& program);

/// The same for a tool that has already taken the log options (the
/// `cmdbus worker` subcommand): `args` are the arguments after the
/// command's name. Returns the exit code; throws what worker_main turns
/// into exit codes (the tool's own mapping reports them).
int run_worker(const std::vector<std::string>& args,
               const worker_program& program);

} // namespace cmdbus
