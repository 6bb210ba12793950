// `cmdbus migrate`: create or upgrade the schema, or report its state.

#include <iostream>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/sql/bundle.hpp"

namespace cmdbus::cli {

namespace {

const command_spec migrate_command{
  R"(usage: cmdbus migrate [--dsn DSN] [--verbose] [--json] [--log-level LEVEL]
       cmdbus migrate --status [--dsn DSN] [--json]

Creates or upgrades the cmdbus database objects:
  * PGMQ: the real `pgmq` extension when CREATE EXTENSION pgmq works,
    otherwise cmdbus's PGMQ-compatible SQL (schema pgmq);
  * the commandbus schema (tables, indexes, stored procedures).
Each migration file is applied once, in order, in its own transaction, and
recorded in commandbus.cmdbus_migrations. Running it again is a no-op;
concurrent runs wait for each other (advisory lock).

With --status nothing changes: it lists the applied migrations (name,
applied_at, and whether the recorded checksum matches the file bundled in
this build: match; superseded, an earlier text that differed only in
comments; changed, which makes `cmdbus migrate` refuse to run; not_bundled,
applied by another build) and the pending ones (bundled, not applied). The
bundled pgmq files are listed only when `migrate` would apply them (the
real pgmq extension is used instead when the server has it).
)",
  {{"--status", "", "report applied and pending migrations; change nothing"},
   dsn_option,
   dsn_file_option,
   {"--verbose", "", "log each step to stderr (at least --log-level info)",
    "-v"},
   {"--json", "", "print the result as JSON"},
   help_option},
  R"(
Exit codes: 0 ok (--status: also with pending or changed migrations),
1 usage error, 3 database unavailable, 4 migration failed.
)"};

int print_status(const args& a, db::connection& conn) {
  auto report = db::migration_status(conn, sql::pgmq_files(),
                                     sql::commandbus_files());
  auto pgmq = report.pgmq ? std::string{db::to_string(*report.pgmq)}
                          : std::string{"not installed"};
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("target", conn.target())
      .field("pgmq",
             report.pgmq ? std::optional<std::string>{pgmq} : std::nullopt)
      .field("pgmq_extension_available", report.pgmq_extension_available)
      .field("tampered", report.tampered());
    auto list = [&](const char* key, bool applied) {
      out.key(key).begin_array();
      for (auto& m : report.migrations) {
        if (m.applied != applied)
          continue;
        out.begin_object()
          .field("name", m.full_name())
          .field("component", m.component)
          .field("version", m.version);
        if (applied)
          out.field("applied_at", m.applied_at)
            .field("checksum", m.recorded_checksum)
            .field("bundled_checksum", m.bundled_checksum)
            .field("checksum_state", std::string{db::to_string(*m.checksum)});
        else
          out.field("bundled_checksum", m.bundled_checksum);
        out.end_object();
      }
      out.end_array();
    };
    list("applied", true);
    list("pending", false);
    out.end_object();
    out.print(std::cout);
    return exit_ok;
  }
  std::cout << "database " << conn.target() << " (pgmq: " << pgmq
            << (report.pgmq_extension_available ? ", extension available" : "")
            << ")\n\n";
  std::vector<std::vector<std::string>> rows;
  for (auto& m : report.migrations) {
    if (m.applied)
      rows.push_back({m.full_name(), "applied", format_timestamp(*m.applied_at),
                      db::to_string(*m.checksum)});
    else
      rows.push_back({m.full_name(), "pending", "", ""});
  }
  print_table(std::cout, {"migration", "state", "applied_at", "checksum"},
              rows);
  std::cout << '\n'
            << report.migrations.size() - report.pending() << " applied, "
            << report.pending() << " pending";
  if (report.tampered())
    std::cout << "; a migration was changed after it was applied: "
                 "`cmdbus migrate` will refuse to run";
  std::cout << '\n';
  return exit_ok;
}

} // namespace

int run_migrate(const std::vector<std::string>& argv) {
  args a{argv, migrate_command};
  if (a.help())
    return print_help(migrate_command);
  a.expect_positional(0, "no positional arguments");
  // --verbose shows at least the info lines, whatever the level otherwise.
  if (a.flag("--verbose") && log::logger()->level() > spdlog::level::info)
    log::set_level(spdlog::level::info);
  db::connection_options opts;
  opts.pooler = pooler_of_environment();
  auto conn = db::connection::open(a.dsn(), opts);
  if (a.flag("--status"))
    return print_status(a, conn);
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
