// `cmdbus cancel`: cancels a command before it runs (a delayed command not
// due yet, or one still waiting in the backlog), over
// troubleshooting_queue::cancel_pending. See docs/scheduling.md.

#include <iostream>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/troubleshooting.hpp"

namespace cmdbus::cli {

namespace {

const command_spec cancel_command{
  R"(usage: cmdbus cancel DOMAIN COMMAND_ID [--reason TEXT] [--operator NAME]
                     [--dsn DSN] [--json]

Cancels a command before it runs: one that is PENDING and whose message no
worker has read yet, such as a delayed command (`cmdbus send --delay`) that
is not due. In one transaction its message is archived, so that no worker
ever runs it, and the command becomes CANCELED with what `cmdbus tsq cancel`
writes: a CANCELED reply with the reason to its reply_to (if any), an
OPERATOR_CANCEL audit event, and its batch's canceled count (which may
complete the batch). A command that has started, or that a worker is reading
at this moment, is left alone (exit code 2); one in the troubleshooting
queue is canceled with `cmdbus tsq cancel`.
)",
  {{"--reason", "TEXT", "the reason, in the reply and the audit"},
   {"--operator", "NAME", "recorded in the audit (default: $USER)"},
   dsn_option,
   dsn_file_option,
   {"--json", "",
    "print {command_id, canceled: true, batch_id, batch_completed}"},
   help_option},
  R"(
Exit codes: 0 canceled, 1 usage error, 2 no such command, or it has started
(or is being read) and can no longer be canceled before it runs.
)"};

} // namespace

int run_cancel(const std::vector<std::string>& argv) {
  args a{argv, cancel_command};
  if (a.help())
    return print_help(cancel_command);
  a.expect_positional(2, "DOMAIN and COMMAND_ID");
  auto domain = domain_arg(a);
  auto id = parse_uuid_arg("COMMAND_ID", a.positional()[1]);
  auto operator_name = a.option("--operator");
  if (!operator_name)
    operator_name = default_operator();
  db::pool pool{pool_options_for(a, 1)};
  troubleshooting_queue tsq{pool};
  auto res = tsq.cancel_pending(domain, id, a.option("--reason"),
                                operator_name);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("command_id", id)
      .field("canceled", true)
      .field("batch_id", res.batch_id)
      .field("batch_completed", res.batch_completed)
      .end_object();
    out.print(std::cout);
  } else {
    std::cout << "canceled command " << id.to_string() << " in " << domain
              << " before it ran";
    if (res.batch_id)
      std::cout << " (batch " << res.batch_id->to_string()
                << (res.batch_completed ? ", now complete)" : ")");
    std::cout << "\n";
  }
  return exit_ok;
}

} // namespace cmdbus::cli
