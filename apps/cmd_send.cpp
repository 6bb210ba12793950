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
                   [--delay D | --at T] [--create] [--wait DUR]
                   [--dsn DSN] [--json]

Sends one command of type TYPE to the queue DOMAIN__commands in one
transaction: PGMQ message, command row (PENDING), SENT audit and NOTIFY.
The queue must exist (a worker or an earlier `--create` made it), so that a
mistyped DOMAIN fails instead of creating a queue nobody reads.

With --delay or --at the command is sent now but runs not before that time:
its message stays invisible to every worker until then (`cmdbus show` says
when it is due, `cmdbus list DOMAIN --scheduled` lists such commands, and
`cmdbus cancel` cancels one before it runs).

With --wait the command is sent, and then its status is polled (growing
delays up to 0.5 s, no connection held in between) until it is final or DUR
has passed; the exit code says which (below).
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
   {"--wait", "DUR",
    "after sending, wait up to DUR (e.g. 15s, 2m) for the command's final "
    "status and print it (--json: adds status, final and the last error)"},
   dsn_option,
   dsn_file_option,
   {"--json", "",
    "print the result as JSON: {command_id, msg_id, queue, correlation_id, "
    "not_before} (not_before is null unless --delay or --at was given)"},
   help_option},
  R"(
Use `--` before a TYPE that starts with '-'.

Exit codes: 0 sent (with --wait: and COMPLETED), 1 invalid input, 2
duplicate command id or no queue DOMAIN__commands (without --create), 3
database unavailable, 4 other failure (e.g. a database without the cmdbus
schema), 5 with --wait: the command is FAILED, CANCELED or
IN_TROUBLESHOOTING_QUEUE, 6 login refused, 7 with --wait: DUR passed while
the command was still PENDING or IN_PROGRESS (it was sent and will run).
)"};

/// The exit code of `send --wait` for what the wait found.
int exit_code_of(const command_wait_result& w) {
  if (!w.final)
    return exit_timeout;
  return w.command->status == command_status::completed ? exit_ok
                                                        : exit_incomplete;
}

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
  auto wait = a.duration_option("--wait");
  std::optional<command_wait_result> waited;
  send_result res;
  if (wait) {
    waited = bus.send_and_wait(req, *wait);
    res = waited->sent;
  } else {
    res = bus.send(req);
  }
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("command_id", res.command_id)
      .field("msg_id", res.msg_id)
      .field("queue", queue)
      .field("correlation_id", *req.correlation_id)
      .field("not_before", req.not_before);
    if (waited && waited->command) {
      auto& m = *waited->command;
      out.field("status", std::string{to_string(m.status)})
        .field("final", waited->final)
        .field("error_type", m.last_error_type)
        .field("error_code", m.last_error_code)
        .field("error_message", m.last_error_msg);
    }
    out.end_object();
    out.print(std::cout);
  } else {
    std::cout << "sent command " << res.command_id.to_string() << " to "
              << queue << " (msg_id " << res.msg_id << ", correlation_id "
              << req.correlation_id->to_string() << ")";
    if (req.not_before)
      std::cout << ", not before " << format_timestamp(*req.not_before);
    std::cout << "\n";
    if (waited && waited->command) {
      auto& m = *waited->command;
      std::cout << to_string(m.status);
      if (m.status != command_status::completed && m.last_error_type)
        std::cout << " (" << *m.last_error_type << " "
                  << m.last_error_code.value_or("") << ": "
                  << m.last_error_msg.value_or("") << ")";
      if (!waited->final)
        std::cout << " after " << wait->count() << " ms (still running)";
      std::cout << "\n";
    }
  }
  return waited ? exit_code_of(*waited) : exit_ok;
}

} // namespace cmdbus::cli
