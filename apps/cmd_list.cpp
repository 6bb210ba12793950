// `cmdbus list`: a domain's commands.

#include <iostream>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::cli {

namespace {

const command_spec list_command{
  R"(usage: cmdbus list DOMAIN [--status S] [--type T] [--batch B] [--scheduled]
                   [--limit N] [--offset N] [--dsn DSN] [--json]

Lists the domain's commands, newest first, with the batch each belongs to
(empty when none). S is one of PENDING, IN_PROGRESS, COMPLETED, FAILED,
CANCELED, IN_TROUBLESHOOTING_QUEUE (any case; TSQ for the last); B is a
batch id: only that batch's commands.

With --scheduled it lists the delayed commands that are not due yet
(PENDING, their message never read and invisible until their not-before
time), earliest due first, with the time each is due; a retry waiting for
its backoff is not one of them.
)",
  {{"--status", "S", "only commands in status S"},
   {"--type", "T", "only commands of type T"},
   {"--batch", "B", "only the commands of batch B"},
   {"--scheduled", "",
    "only delayed commands not due yet, earliest due first, with due_at"},
   {"--limit", "N", "at most N commands (default 100)"},
   {"--offset", "N", "skip the first N"},
   dsn_option,
   dsn_file_option,
   {"--json", "",
    "print a JSON array of commands (with --scheduled each has \"due_at\")"},
   help_option},
  R"(
An empty list says nothing about whether DOMAIN exists: a mistyped domain
lists nothing, like a quiet one (`cmdbus queues` lists the real ones).

Exit codes: 0 ok, 1 usage error (e.g. an unknown status or a bad UUID).
)"};

// --scheduled: the delayed commands not due yet, with their due time.
int list_scheduled(const args& a, command_bus& bus, db::pool& pool,
                   const command_query& q) {
  auto cmds = bus.query_scheduled(q);
  if (cmds.empty())
    note_if_unknown_domain(pool, *q.domain);
  if (a.flag("--json")) {
    json_out out;
    out.begin_array();
    for (auto& s : cmds) {
      out.begin_object();
      write_command_fields(out, s.command);
      out.field("due_at", s.due_at).end_object();
    }
    out.end_array();
    out.print(std::cout);
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& s : cmds)
    rows.push_back({s.command.command_id.to_string(), s.command.command_type,
                    format_timestamp(s.due_at),
                    format_timestamp(s.command.created_at),
                    s.command.batch_id ? s.command.batch_id->to_string() : ""});
  print_table(std::cout,
              {"command_id", "type", "due_at", "created_at", "batch"}, rows);
  return exit_ok;
}

} // namespace

int run_list(const std::vector<std::string>& argv) {
  args a{argv, list_command};
  if (a.help())
    return print_help(list_command);
  a.expect_positional(1, "DOMAIN");
  command_query q;
  q.domain = domain_arg(a);
  if (auto s = a.option("--status"))
    q.status = parse_status_arg("--status", *s);
  q.command_type = a.option("--type");
  if (auto b = a.option("--batch"))
    q.batch_id = parse_uuid_arg("--batch", *b);
  q.limit = a.int_option("--limit", 0).value_or(100);
  q.offset = a.int_option("--offset", 0).value_or(0);
  db::pool pool{pool_options_for(a, 1)};
  command_bus bus{pool};
  if (a.flag("--scheduled"))
    return list_scheduled(a, bus, pool, q);
  auto cmds = bus.query_commands(q);
  if (cmds.empty())
    note_if_unknown_domain(pool, *q.domain);
  if (a.flag("--json")) {
    json_out out;
    out.begin_array();
    for (auto& m : cmds)
      write_command(out, m);
    out.end_array();
    out.print(std::cout);
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& m : cmds)
    rows.push_back(
      {m.command_id.to_string(), m.command_type,
       std::string{to_string(m.status)},
       std::to_string(m.attempts) + "/" + std::to_string(m.max_attempts),
       format_timestamp(m.created_at), m.last_error_code.value_or(""),
       m.batch_id ? m.batch_id->to_string() : ""});
  print_table(std::cout,
              {"command_id", "type", "status", "attempts", "created_at",
               "last_error", "batch"},
              rows);
  return exit_ok;
}

} // namespace cmdbus::cli
