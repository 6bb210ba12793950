// The `cmdbus` command-line tool: migrations, sending and inspecting
// commands, queue metrics.

#include <iostream>
#include <string>
#include <vector>

#include "apps/cli.hpp"
#include "db/error.hpp"
#include "model/errors.hpp"

namespace {

constexpr const char* main_help = R"(usage: cmdbus <command> [options]

Commands:
  migrate      create or upgrade the database schema (commandbus and PGMQ)
  send         send one command
  send-batch   send the commands of a JSON-lines file
  show         show a command's metadata and audit trail
  list         list a domain's commands
  queues       show PGMQ metrics of every queue
  worker       process commands with the demo handlers (until SIGINT/SIGTERM,
               or once with --tick)

Options:
  -h, --help         show this help (also after a command)
  --version          print the version
  --log-level LEVEL  trace, debug, info, warn, error, critical or off, before
                     or after any command (default: $CMDBUS_LOG_LEVEL, else
                     $SPDLOG_LEVEL, else info for worker and warn for the
                     others); the log goes to stderr

Connection: --dsn DSN, else $CMDBUS_DSN, else the standard libpq environment
(PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ...). DSN is a libpq
key=value string or a postgresql:// URI. Passwords are never printed.

Output: human-readable tables; --json prints JSON instead.

Exit codes: 0 ok, 1 usage error or invalid input, 2 not found or duplicate,
3 database unavailable, 4 other failure (e.g. a failed migration).
)";

using namespace cmdbus;

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string command;
  try {
    auto level = cli::take_log_level(args);
    if (!args.empty()) {
      command = args.front();
      args.erase(args.begin());
    }
    cli::set_log_level(command, level);
    if (command.empty()) {
      std::cerr << main_help;
      return cli::exit_usage;
    }
    if (command == "-h" || command == "--help" || command == "help") {
      std::cout << main_help;
      return cli::exit_ok;
    }
    if (command == "--version") {
      std::cout << "cmdbus 0.1.0\n";
      return cli::exit_ok;
    }
    if (command == "migrate")
      return cli::run_migrate(args);
    if (command == "send")
      return cli::run_send(args);
    if (command == "send-batch")
      return cli::run_send_batch(args);
    if (command == "show")
      return cli::run_show(args);
    if (command == "list")
      return cli::run_list(args);
    if (command == "queues")
      return cli::run_queues(args);
    if (command == "worker")
      return cli::run_worker(args);
    throw cli::usage_error{"unknown command '" + command + "'"};
  } catch (const cli::usage_error& e) {
    std::cerr << "cmdbus: " << e.message << " (see `cmdbus "
              << (command.empty() || command[0] == '-' ? "" : command + " ")
              << "--help`)\n";
    return cli::exit_usage;
  } catch (const cli::not_found& e) {
    std::cerr << "cmdbus: " << e.message << '\n';
    return cli::exit_not_found;
  } catch (const db::invalid_argument& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return cli::exit_usage;
  } catch (const decode_error& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return cli::exit_usage;
  } catch (const duplicate_command_error& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return cli::exit_not_found;
  } catch (const batch_not_found_error& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return cli::exit_not_found;
  } catch (const db::error& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return e.code() == db::errc::connection ? cli::exit_db_unavailable
                                            : cli::exit_failed;
  } catch (const std::exception& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return cli::exit_failed;
  }
}
