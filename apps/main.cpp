// The `cmdbus` command-line tool: migrations, sending, inspecting and
// repairing commands, batches and queues, and the demo worker.

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "cmdbus/cli/program.hpp"
#include "cmdbus/model/version.hpp"

namespace {

using namespace cmdbus;

struct command_entry {
  const char* name;
  int (*run)(const std::vector<std::string>&);
};

constexpr command_entry commands[] = {
  {"migrate", cli::run_migrate},
  {"grant", cli::run_grant},
  {"send", cli::run_send},
  {"send-batch", cli::run_send_batch},
  {"show", cli::run_show},
  {"list", cli::run_list},
  {"wait", cli::run_wait},
  {"cancel", cli::run_cancel},
  {"prune", cli::run_prune},
  {"schedule", cli::run_schedule},
  {"tsq", cli::run_tsq},
  {"batch", cli::run_batch},
  {"process", cli::run_process},
  {"stats", cli::run_stats},
  {"queues", cli::run_queues},
  {"replies", cli::run_replies},
  {"worker", cli::run_worker},
  {"node", cli::run_node},
  {"cluster", cli::run_cluster},
  {"api", cli::run_api},
};

constexpr const char* main_synopsis
  = R"(usage: cmdbus [--dsn DSN | --dsn-file PATH] [--log-level LEVEL]
              [--log-format FORMAT] <command> [options]
       cmdbus help <command>

Commands:
  migrate      create or upgrade the database schema; --status lists
               applied and pending migrations
  grant        set up the worker, operator and reader group roles and make
               login roles members (least privilege)
  send         send one command
  send-batch   send the commands of a JSON-lines file (optionally as a batch)
  show         show a command: metadata, payload, audit trail, when it is
               due, next retry
  list         list a domain's commands
  wait         wait until a command is finished (exit 0 completed, 5 not)
  cancel       cancel a command before it runs (e.g. a delayed one)
  prune        remove finished history older than an age, in chunks
  schedule     recurring schedules: add, list, show, pause, resume, remove,
               trigger
  tsq          the troubleshooting queue: list, show, retry, cancel, complete
  batch        batches: list, show, refresh
  process      process managers: list, show, start (the demo workflow)
  stats        commands by status, queue depth and throughput per domain
  queues       show PGMQ metrics of every queue
  replies      read or peek at a reply queue
  worker       process commands with the demo handlers, with --demo (until
               SIGINT/SIGTERM, or once with --tick); without --demo it
               refuses to start
  node         run the demo handlers for workers elsewhere, with --demo
               (a handler node: no database access; workers connect with
               --remote-pool HOST:PORT); without --demo it refuses to start
  cluster      the admin ports of workers and nodes: status (one table),
               drain (a worker stops taking work; waits until idle)
  api          serve the command API over HTTP (send and wait for
               commands from any language, with bearer tokens)
)";

constexpr const char* main_epilogue = R"(
--dsn, --dsn-file, --json, --log-level and --log-format may stand before or
after the command.

Connection: --dsn DSN or --dsn-file PATH, else $CMDBUS_DSN or
$CMDBUS_DSN_FILE, else the standard libpq environment (PGHOST, PGPORT,
PGUSER, PGPASSFILE, PGDATABASE, ...). DSN is a libpq key=value string or a
postgresql:// URI; a DSN file holds one and must be readable by its owner
alone (mode 600). Keep passwords off the command line: in a DSN file or in
libpq's password file (PGPASSFILE). Passwords are never printed.

Output: human-readable text; --json prints JSON instead (errors too, as
{"error": "...", "exit_code": N} on standard output).

Exit codes:
  0  ok
  1  usage error or invalid input
  2  not found, duplicate, not in the state the operation needs, or a
     domain whose queue does not exist (`send`, `worker` without --create)
  3  database unavailable (cannot connect, or the connection broke)
  4  other failure (e.g. a failed migration, a database without the schema
     or with migrations pending: run `cmdbus migrate`)
  5  the commands did not all complete (`wait`, `worker --tick`)
  6  the server refused the login (wrong password, unknown role or database)
  7  timed out (`wait --timeout`)
  8  a budget cut the run short, work may be left (`worker --tick` with
     --tick-max-duration, --tick-runner-max-duration or
     --tick-runner-max-items)
)";

// The tool's own options, before any command.
const cli::command_spec main_command{
  main_synopsis,
  {{"--help", "", "show this help (`cmdbus CMD --help` for a command's)", "-h"},
   {"--version", "", "print the version"},
   cli::dsn_option,
   cli::dsn_file_option,
   {"--json", "", "JSON output (see Output below)"},
   cli::log_level_option,
   cli::log_format_option,
   {"--", "", "ends the options: what follows is positional"}},
  main_epilogue,
  false};

const command_entry* find_command(const std::string& name) {
  for (auto& c : commands)
    if (name == c.name)
      return &c;
  return nullptr;
}

std::vector<std::string> command_names() {
  std::vector<std::string> names;
  for (auto& c : commands)
    names.emplace_back(c.name);
  return names;
}

// Names an unknown command (or global option) and the nearest known one.
std::string unknown_command(const std::string& name) {
  if (name.rfind("-", 0) == 0) {
    // The name only: a mistyped --dsn=... may carry a password.
    auto option = name.substr(0, name.find('='));
    std::vector<std::string> known;
    for (const auto& o : main_command.options)
      known.emplace_back(o.name);
    return "unknown option '" + option + "'"
           + config::did_you_mean(option, known);
  }
  auto near = config::nearest(name, command_names());
  return "unknown command '" + name + "'"
         + (near.empty() ? "" : "; did you mean " + near + "?");
}

// Moves the global options that stand before the command (--dsn,
// --dsn-file, --json) behind it, where the command's own parser reads them.
std::vector<std::string> take_global_options(std::vector<std::string>& argv) {
  std::vector<std::string> moved;
  while (!argv.empty()) {
    auto& a = argv.front();
    if (a == "--dsn" || a == "--dsn-file") {
      if (argv.size() < 2)
        throw cli::usage_error{a + " needs a value"};
      moved.insert(moved.end(), {a, argv[1]});
      argv.erase(argv.begin(), argv.begin() + 2);
    } else if (a.rfind("--dsn=", 0) == 0 || a.rfind("--dsn-file=", 0) == 0
               || a == "--json") {
      moved.push_back(a);
      argv.erase(argv.begin());
    } else {
      break;
    }
  }
  return moved;
}

} // namespace

int main(int argc, char** argv) {
  return cli::program_main(argc, argv, "cmdbus", [](cli::program_context& ctx) {
    auto& args = ctx.args;
    auto global = take_global_options(args);
    std::string command;
    if (!args.empty()) {
      command = args.front();
      args.erase(args.begin());
    }
    // Behind the command's own arguments (a subcommand stays first), before
    // a `--`.
    args.insert(std::find(args.begin(), args.end(), "--"), global.begin(),
                global.end());
    const auto* entry = find_command(command);
    if (entry != nullptr)
      ctx.help_of = "cmdbus " + command;
    ctx.start_logging(command);
    if (command.empty()) {
      std::cerr << cli::help_text(main_command);
      return cli::exit_usage;
    }
    if (command == "-h" || command == "--help")
      return cli::print_help(main_command);
    if (command == "help") {
      if (args.empty() || args.front().rfind("--", 0) == 0)
        return cli::print_help(main_command);
      const auto* asked = find_command(args.front());
      if (asked == nullptr)
        throw cli::usage_error{unknown_command(args.front())};
      return asked->run({"--help"});
    }
    if (command == "--version") {
      std::cout << "cmdbus " << version() << "\n";
      return cli::exit_ok;
    }
    if (entry == nullptr)
      throw cli::usage_error{unknown_command(command)};
    return entry->run(args);
  });
}
