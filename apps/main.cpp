// The `cmdbus` command-line tool: migrations, sending, inspecting and
// repairing commands, batches and queues, and the demo worker.

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cmdbus/cli/cli.hpp"
#include "cmdbus/model/version.hpp"

namespace {

using namespace cmdbus;

struct command_entry {
  const char* name;
  int (*run)(const std::vector<std::string>&);
};

constexpr command_entry commands[] = {
  {"migrate", cli::run_migrate},
  {"send", cli::run_send},
  {"send-batch", cli::run_send_batch},
  {"show", cli::run_show},
  {"list", cli::run_list},
  {"wait", cli::run_wait},
  {"tsq", cli::run_tsq},
  {"batch", cli::run_batch},
  {"process", cli::run_process},
  {"stats", cli::run_stats},
  {"queues", cli::run_queues},
  {"replies", cli::run_replies},
  {"worker", cli::run_worker},
  {"node", cli::run_node},
  {"cluster", cli::run_cluster},
};

constexpr const char* main_help
  = R"(usage: cmdbus [--dsn DSN] [--log-level LEVEL] [--log-format FORMAT]
              <command> [options]
       cmdbus help <command>

Commands:
  migrate      create or upgrade the database schema; --status lists
               applied and pending migrations
  send         send one command
  send-batch   send the commands of a JSON-lines file (optionally as a batch)
  show         show a command: metadata, payload, audit trail, next retry
  list         list a domain's commands
  wait         wait until a command is finished (exit 0 completed, 5 not)
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

Options:
  -h, --help         show this help (`cmdbus CMD --help` for a command's)
  --version          print the version
  --dsn DSN          the database, before or after the command
  --json             JSON output, before or after the command
  --log-level LEVEL  trace, debug, info, warn, error, critical or off, before
                     or after any command (default: $CMDBUS_LOG_LEVEL, else
                     $SPDLOG_LEVEL, else info for worker and warn for the
                     others); the log goes to stderr
  --log-format FORMAT
                     text, json (one JSON object per line: time, level,
                     logger, actor, domain, message) or journal (for
                     journald: a <N> priority prefix, the origin, the
                     message, no time), before or after any command
                     (default: $CMDBUS_LOG_FORMAT, else text)
  --                 ends the options: what follows is positional

Connection: --dsn DSN, else $CMDBUS_DSN, else the standard libpq environment
(PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ...). DSN is a libpq
key=value string or a postgresql:// URI. Passwords are never printed.

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
)";

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
    auto near = cli::nearest(option, {"--help", "--version", "--dsn", "--json",
                                      "--log-level", "--log-format"});
    return "unknown option '" + option + "'"
           + (near.empty() ? "" : "; did you mean " + near + "?");
  }
  auto near = cli::nearest(name, command_names());
  return "unknown command '" + name + "'"
         + (near.empty() ? "" : "; did you mean " + near + "?");
}

// Moves the global options that stand before the command (--dsn, --json)
// behind it, where the command's own parser reads them.
std::vector<std::string> take_global_options(std::vector<std::string>& argv) {
  std::vector<std::string> moved;
  while (!argv.empty()) {
    auto& a = argv.front();
    if (a == "--dsn") {
      if (argv.size() < 2)
        throw cli::usage_error{"--dsn needs a value"};
      moved.insert(moved.end(), {"--dsn", argv[1]});
      argv.erase(argv.begin(), argv.begin() + 2);
    } else if (a.rfind("--dsn=", 0) == 0 || a == "--json") {
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
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string command;
  bool json = cli::wants_json(args);
  try {
    auto level = cli::take_log_level(args);
    auto format = cli::take_log_format(args);
    auto global = take_global_options(args);
    if (!args.empty()) {
      command = args.front();
      args.erase(args.begin());
    }
    // Behind the command's own arguments (a subcommand stays first), before
    // a `--`.
    args.insert(std::find(args.begin(), args.end(), "--"), global.begin(),
                global.end());
    cli::set_log_level(command, level);
    cli::set_log_format(format);
    if (command.empty()) {
      std::cerr << main_help;
      return cli::exit_usage;
    }
    if (command == "-h" || command == "--help") {
      std::cout << main_help;
      return cli::exit_ok;
    }
    if (command == "help") {
      if (args.empty() || args.front().rfind("--", 0) == 0) {
        std::cout << main_help;
        return cli::exit_ok;
      }
      auto* entry = find_command(args.front());
      if (entry == nullptr) {
        auto message = unknown_command(args.front());
        command.clear();
        throw cli::usage_error{message};
      }
      return entry->run({"--help"});
    }
    if (command == "--version") {
      std::cout << "cmdbus " << version() << "\n";
      return cli::exit_ok;
    }
    if (auto* entry = find_command(command))
      return entry->run(args);
    auto message = unknown_command(command);
    command.clear();
    throw cli::usage_error{message};
  } catch (...) {
    auto f = cli::describe_failure(std::current_exception());
    if (f.code == cli::exit_usage
        && f.message.find("--help`") == std::string::npos)
      f.message += command.empty() || command[0] == '-'
                     ? " (see `cmdbus --help`)"
                     : " (see `cmdbus " + command + " --help`)";
    return cli::report_failure(f, "cmdbus", json);
  }
}
