#include <iostream>

#include "apps/cli.hpp"
#include "apps/json_out.hpp"
#include "db/connection.hpp"
#include "db/migrate.hpp"
#include "model/log.hpp"
#include "sql/bundle.hpp"

namespace cmdbus::cli {

namespace {

constexpr const char* help
  = R"(usage: cmdbus migrate [--dsn DSN] [--verbose] [--json] [--log-level LEVEL]

Creates or upgrades the cmdbus database objects:
  * PGMQ: the real `pgmq` extension when CREATE EXTENSION pgmq works,
    otherwise cmdbus's PGMQ-compatible SQL (schema pgmq);
  * the commandbus schema (tables, indexes, stored procedures).
Each migration file is applied once, in order, in its own transaction, and
recorded in commandbus.cmdbus_migrations. Running it again is a no-op;
concurrent runs wait for each other (advisory lock).

Options:
  --dsn DSN       connection string (default: $CMDBUS_DSN, then libpq env)
  -v, --verbose   log each step to stderr (at least --log-level info)
  --json          print the result as JSON
  -h, --help      show this help

Exit codes: 0 ok, 1 usage error, 3 database unavailable, 4 migration failed.
)";

} // namespace

int run_migrate(const std::vector<std::string>& argv) {
  args a{argv, {"--help", "--verbose", "--json"}, {"--dsn"}};
  if (a.flag("--help")) {
    std::cout << help;
    return exit_ok;
  }
  a.expect_positional(0, "no positional arguments");
  // --verbose shows at least the info lines, whatever the level otherwise.
  if (a.flag("--verbose") && log::logger()->level() > spdlog::level::info)
    log::set_level(spdlog::level::info);
  auto conn = db::connection::open(a.dsn());
  auto report = db::migrate(conn, sql::pgmq_files(), sql::commandbus_files());
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("target", conn.target())
      .field("pgmq", db::to_string(report.pgmq))
      .key("applied")
      .begin_array();
    for (auto& name : report.applied)
      out.value(name);
    out.end_array().end_object();
    out.print(std::cout);
    return exit_ok;
  }
  for (auto& name : report.applied)
    std::cout << "applied " << name << '\n';
  std::cout << "database " << conn.target()
            << " is up to date (pgmq: " << db::to_string(report.pgmq) << ", "
            << report.applied.size() << " migration(s) applied)\n";
  return exit_ok;
}

} // namespace cmdbus::cli
