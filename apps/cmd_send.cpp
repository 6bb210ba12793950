// `cmdbus send`: one command, in one transaction.

#include <iostream>
#include <limits>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/cli/queues.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/json.hpp"

namespace cmdbus::cli {

namespace {

const command_spec send_command{
  R"(usage: cmdbus send DOMAIN TYPE [--data JSON|@FILE|-] [--id UUID]
                   [--reply-to QUEUE] [--correlation-id UUID]
                   [--max-attempts N] [--priority N]
                   [--delay D | --at T] [--create]
                   [--dsn DSN] [--json]

Sends one command of type TYPE to the queue DOMAIN__commands in one
transaction: PGMQ message, command row (PENDING), SENT audit and NOTIFY.
The queue must exist (a worker or an earlier `--create` made it), so that a
mistyped DOMAIN fails instead of creating a queue nobody reads.

With --delay or --at the command is sent now but runs not before that time:
its message stays invisible to every worker until then (`cmdbus show` says
when it is due, `cmdbus list DOMAIN --scheduled` lists such commands, and
`cmdbus cancel` cancels one before it runs).
)",
  {{"--data", "JSON",
    "the payload, a JSON object (default {}); @FILE reads it from FILE, - "
    "from standard input"},
   {"--id", "UUID",
    "the command id (default: a new random UUID); sending an id that exists "
    "in DOMAIN fails with exit code 2"},
   {"--reply-to", "QUEUE", "queue for the reply (created when missing)"},
   {"--correlation-id", "UUID", "default: a new random UUID"},
   {"--max-attempts", "N", "default: 3"},
   delay_option,
   at_option,
   {"--priority", "N",
    "an integer, higher runs first on workers that read the domain by "
    "priority (default: none, the same as 0; docs/scheduling.md)"},
   {"--create", "", "create DOMAIN__commands when it does not exist"},
   dsn_option,
   dsn_file_option,
   {"--json", "",
    "print the result as JSON: {command_id, msg_id, queue, correlation_id, "
    "not_before} (not_before is null unless --delay or --at was given)"},
   help_option},
  R"(
Use `--` before a TYPE that starts with '-'.

Exit codes: 0 sent, 1 invalid input, 2 duplicate command id or no queue
DOMAIN__commands (without --create), 3 database unavailable, 4 other failure
(e.g. a database without the cmdbus schema), 6 login refused.
)"};

} // namespace

int run_send(const std::vector<std::string>& argv) {
  args a{argv, send_command};
  if (a.help())
    return print_help(send_command);
  a.expect_positional(2, "DOMAIN and TYPE");
  send_request req;
  req.domain = domain_arg(a);
  req.command_type = a.positional()[1];
  if (req.command_type.empty())
    throw usage_error{"TYPE must not be empty"};
  req.data = parse_object_arg("--data", a.option("--data").value_or("{}"));
  req.command_id = a.option("--id") ? parse_uuid_arg("--id", *a.option("--id"))
                                    : uuid::random();
  req.correlation_id = a.option("--correlation-id")
                         ? parse_uuid_arg("--correlation-id",
                                          *a.option("--correlation-id"))
                         : uuid::random();
  if (auto q = a.option("--reply-to")) {
    db::validate_queue_name(*q);
    req.reply_to = *q;
  }
  req.max_attempts = a.int_option("--max-attempts", 1);
  req.not_before = not_before_arg(a);
  req.priority = a.int_option("--priority", std::numeric_limits<int>::min());
  auto queue = db::command_queue(req.domain);
  db::pool pool{pool_options_for(a)};
  require_queue(pool, queue, a.flag("--create"));
  command_bus bus{pool};
  auto res = bus.send(req);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("command_id", res.command_id)
      .field("msg_id", res.msg_id)
      .field("queue", queue)
      .field("correlation_id", *req.correlation_id)
      .field("not_before", req.not_before)
      .end_object();
    out.print(std::cout);
  } else {
    std::cout << "sent command " << res.command_id.to_string() << " to "
              << queue << " (msg_id " << res.msg_id << ", correlation_id "
              << req.correlation_id->to_string() << ")";
    if (req.not_before)
      std::cout << ", not before " << format_timestamp(*req.not_before);
    std::cout << "\n";
  }
  return exit_ok;
}

} // namespace cmdbus::cli
