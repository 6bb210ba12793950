// `cmdbus grant`: the least-privilege group roles and their members.

#include <iostream>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/db/roles.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::cli {

namespace {

const command_spec grant_command{
  R"(usage: cmdbus grant [--worker ROLE]... [--operator ROLE]...
                    [--reader ROLE]... [--prefix NAME] [--dry-run]
                    [--dsn DSN] [--json]

Sets up three group roles (NOLOGIN) with what each job needs on this
database, and makes existing login roles members of them:
  PREFIX_worker    `cmdbus worker`: reads, claims and finishes commands,
                   replies, batches, process managers, schedules, jobs;
                   creates the priority index of its queues, and the
                   reply queues its commands name
  PREFIX_operator  the operator commands (send, cancel, tsq, batch,
                   schedule, process start) and creating queues
  PREFIX_reader    SELECT only (list, show, stats, queues, tsq list, ...)
None of them may drop a queue, create, alter or drop a table, nor
write the migrations' bookkeeping or PGMQ's list of queues. Queues are
created as the owner (commandbus.cmdbus_create_queue), so that new queues
and tables the owner creates later are usable by the groups at once
(default privileges). Run it as the role that ran `cmdbus migrate` (or a
superuser); creating a group or granting membership needs CREATEROLE.
Roles are the cluster's, rights the database's: run it on each database,
with another --prefix for databases whose roles must stay apart. Running
it again changes nothing; it never revokes.
)",
  {{"--worker", "ROLE", "make ROLE a member of the worker group (repeatable)"},
   {"--operator", "ROLE",
    "make ROLE a member of the operator group (repeatable)"},
   {"--reader", "ROLE", "make ROLE a member of the reader group (repeatable)"},
   {"--prefix", "NAME",
    "the groups are NAME_worker, NAME_operator, NAME_reader (default "
    "cmdbus)"},
   {"--dry-run", "", "print the SQL it would run; change nothing"},
   dsn_option,
   {"--json", "", "print the result as JSON"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error (a bad prefix or role name), 2 a named
role does not exist (create it first: CREATE ROLE name LOGIN ...),
4 the connected role may not do it (nothing was changed).
)"};

} // namespace

int run_grant(const std::vector<std::string>& argv) {
  args a{argv, grant_command};
  if (a.help())
    return print_help(grant_command);
  a.expect_positional(0, "no positional arguments");
  db::grant_request req;
  req.prefix = a.option("--prefix").value_or("cmdbus");
  req.workers = a.options("--worker");
  req.operators = a.options("--operator");
  req.readers = a.options("--reader");
  // Checked before connecting: a usage error needs no database.
  db::role_groups_for(req.prefix);
  for (auto* list : {&req.workers, &req.operators, &req.readers})
    for (auto& name : *list)
      db::validate_role_name(name);
  auto conn = db::connection::open(a.dsn());
  auto plan = db::plan_grants(conn, req);
  if (!plan.missing_roles.empty()) {
    std::string names;
    for (auto& r : plan.missing_roles)
      names += (names.empty() ? "" : ", ") + r;
    throw not_found{"no such role: " + names
                    + " (create it first, e.g. CREATE ROLE name LOGIN "
                      "PASSWORD '...'); nothing was changed"};
  }
  bool dry = a.flag("--dry-run");
  std::vector<std::string> warnings;
  if (!dry)
    warnings = db::apply_grants(conn, plan);
  for (auto& w : warnings)
    log::warn("{}", log::one_line(w));
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("target", conn.target())
      .field("dry_run", dry)
      .key("groups")
      .begin_object()
      .field("worker", plan.groups.worker)
      .field("operator", plan.groups.operator_role)
      .field("reader", plan.groups.reader)
      .end_object();
    auto list = [&](const char* key, const std::vector<std::string>& xs) {
      out.key(key).begin_array();
      for (auto& x : xs)
        out.value(x);
      out.end_array();
    };
    list("created_groups", plan.created_groups);
    out.key("members").begin_object();
    list("worker", req.workers);
    list("operator", req.operators);
    list("reader", req.readers);
    out.end_object();
    list("owners", plan.owners);
    list("statements", plan.statements);
    out.end_object();
    out.print(std::cout);
    return exit_ok;
  }
  if (dry) {
    std::cout << "-- cmdbus grant --dry-run on " << conn.target()
              << ": nothing was changed\nBEGIN;\nSELECT "
                 "pg_advisory_xact_lock("
              << db::migrate_lock_key << ");\n";
    for (auto& sql : plan.statements)
      std::cout << sql << ";\n";
    std::cout << "COMMIT;\n";
    return exit_ok;
  }
  for (auto& g : plan.created_groups)
    std::cout << "created group " << g << '\n';
  auto joined = [&](const std::string& group,
                    const std::vector<std::string>& xs) {
    for (auto& x : xs)
      std::cout << "granted " << group << " to " << x << '\n';
  };
  joined(plan.groups.worker, req.workers);
  joined(plan.groups.operator_role, req.operators);
  joined(plan.groups.reader, req.readers);
  std::cout << "database " << conn.target() << ": groups " << plan.groups.worker
            << ", " << plan.groups.operator_role << ", " << plan.groups.reader
            << " have their rights (" << plan.statements.size()
            << " statements)\n";
  return exit_ok;
}

} // namespace cmdbus::cli
