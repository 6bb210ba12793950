// The `cmdbus` command-line tool: database migrations (and, in later
// releases, sending and inspecting commands and running workers).

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "db/connection.hpp"
#include "db/error.hpp"
#include "db/migrate.hpp"
#include "sql/bundle.hpp"

namespace {

// Exit codes (documented in --help and README).
constexpr int exit_ok = 0;
constexpr int exit_usage = 1;
constexpr int exit_db_unavailable = 3;
constexpr int exit_migration_failed = 4;

constexpr const char* main_help = R"(usage: cmdbus <command> [options]

Commands:
  migrate    create or upgrade the database schema (commandbus and PGMQ)

Options:
  -h, --help     show this help
  --version      print the version

Connection: --dsn DSN, else $CMDBUS_DSN, else the standard libpq environment
(PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ...). DSN is a libpq
key=value string or a postgresql:// URI.

Run `cmdbus <command> --help` for the options of a command.

Exit codes: 0 ok, 1 usage error, 3 database unavailable, 4 migration failed.
)";

constexpr const char* migrate_help = R"(usage: cmdbus migrate [--dsn DSN] [--verbose]

Creates or upgrades the cmdbus database objects:
  * PGMQ: the real `pgmq` extension when CREATE EXTENSION pgmq works,
    otherwise cmdbus's PGMQ-compatible SQL (schema pgmq);
  * the commandbus schema (tables, indexes, stored procedures).
Each migration file is applied once, in order, in its own transaction, and
recorded in commandbus.cmdbus_migrations. Running it again is a no-op;
concurrent runs wait for each other (advisory lock).

Options:
  --dsn DSN       connection string (default: $CMDBUS_DSN, then libpq env)
  -v, --verbose   log each step to stderr
  -h, --help      show this help

Exit codes: 0 ok, 1 usage error, 3 database unavailable, 4 migration failed.
)";

struct usage_error {
  std::string message;
};

// Options shared by all subcommands.
struct common_options {
  std::string dsn;
  bool dsn_given = false;
  bool verbose = false;
  bool help = false;
};

// Consumes the common options in `args`; throws usage_error on unknown ones.
common_options parse_common(const std::vector<std::string>& args) {
  common_options out;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "-h" || a == "--help") {
      out.help = true;
    } else if (a == "-v" || a == "--verbose") {
      out.verbose = true;
    } else if (a == "--dsn") {
      if (i + 1 >= args.size())
        throw usage_error{"--dsn needs a value"};
      out.dsn = args[++i];
      out.dsn_given = true;
    } else if (a.rfind("--dsn=", 0) == 0) {
      out.dsn = a.substr(6);
      out.dsn_given = true;
    } else {
      throw usage_error{"unknown argument '" + a + "'"};
    }
  }
  if (!out.dsn_given) {
    if (const char* env = std::getenv("CMDBUS_DSN"))
      out.dsn = env;
  }
  return out;
}

int run_migrate(const std::vector<std::string>& args) {
  auto opts = parse_common(args);
  if (opts.help) {
    std::cout << migrate_help;
    return exit_ok;
  }
  if (opts.verbose)
    spdlog::set_level(spdlog::level::info);
  auto conn = cmdbus::db::connection::open(opts.dsn);
  auto report = cmdbus::db::migrate(conn, cmdbus::sql::pgmq_files(),
                                    cmdbus::sql::commandbus_files());
  for (auto& name : report.applied)
    std::cout << "applied " << name << '\n';
  std::cout << "database " << conn.target() << " is up to date (pgmq: "
            << cmdbus::db::to_string(report.pgmq) << ", "
            << report.applied.size() << " migration(s) applied)\n";
  return exit_ok;
}

} // namespace

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("cmdbus");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::warn);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << main_help;
    return exit_usage;
  }
  auto command = args.front();
  args.erase(args.begin());
  try {
    if (command == "-h" || command == "--help" || command == "help") {
      std::cout << main_help;
      return exit_ok;
    }
    if (command == "--version") {
      std::cout << "cmdbus 0.1.0\n";
      return exit_ok;
    }
    if (command == "migrate")
      return run_migrate(args);
    throw usage_error{"unknown command '" + command + "'"};
  } catch (const usage_error& e) {
    std::cerr << "cmdbus: " << e.message
              << " (see `cmdbus --help`)\n";
    return exit_usage;
  } catch (const cmdbus::db::invalid_argument& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return exit_usage;
  } catch (const cmdbus::db::error& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return e.code() == cmdbus::db::errc::connection ? exit_db_unavailable
                                                    : exit_migration_failed;
  } catch (const std::exception& e) {
    std::cerr << "cmdbus: " << e.what() << '\n';
    return exit_migration_failed;
  }
}
