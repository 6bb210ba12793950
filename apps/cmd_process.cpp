// `cmdbus process`: process managers from the command line. Starts
// processes of the demo workflows (apps/demo_workflows.hpp), lists a
// domain's processes and shows one with the audit of its steps. A worker
// (`cmdbus worker`) drives the processes on.

#include <algorithm>
#include <cctype>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/demo_workflows.hpp"
#include "apps/output.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/cli/queues.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/process/manager.hpp"
#include "cmdbus/process/registry.hpp"

namespace cmdbus::cli {

namespace {

const command_spec process_command{
  R"(usage: cmdbus process list DOMAIN [--status S]... [--type T] [--limit N]
       cmdbus process show DOMAIN PROCESS_ID
       cmdbus process start DOMAIN TYPE --data JSON|@FILE|- [--batch-id ID]
                            [--create]
       (each also takes --dsn DSN, --json and --help)

Process managers (sagas): workflows that send a command per step, wait for
its reply and decide the next step, with compensation when a step fails.
`cmdbus worker` drives them (it reads DOMAIN__process_replies); the tool
starts processes of the demo types and shows where processes stand. See
docs/processes.md.

  list      the domain's processes, newest first
  show      one process: status, current step, state, error, batch,
            timestamps, and each step's command and reply
  start     starts a process of a demo type (DemoOrder)

Exit codes: 0 ok, 1 usage error or invalid input (also an unknown process
type), 2 unknown process, or a domain whose queue does not exist (start
without --create), 3 database unavailable, 4 other failure.
)",
  {}};

const command_spec list_command{
  R"(usage: cmdbus process list DOMAIN [--status S]... [--type T] [--limit N]
                           [--dsn DSN] [--json]

Lists the domain's processes, newest first: id, type, status, current step,
error code, creation and last update time. S is one of PENDING,
IN_PROGRESS, WAITING, WAITING_FOR_TSQ (or "tsq"), COMPENSATING, COMPLETED,
COMPENSATED, FAILED, CANCELED (any case); repeat --status for several.
)",
  {{"--status", "S", "only processes with this status (repeatable)"},
   {"--type", "T", "only processes of this process type"},
   {"--limit", "N", "at most N processes (default 100)"},
   dsn_option,
   dsn_file_option,
   {"--json", "", "print an array of process objects"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error, 3 database unavailable, 4 other failure.
)"};

const command_spec show_command{
  R"(usage: cmdbus process show DOMAIN PROCESS_ID [--dsn DSN] [--json]

Shows a process: type, status, current step, state, error, batch and
timestamps, then its steps in the order they were sent: step name, the
command (id, type, its status now), when it was sent, the reply's outcome
(SUCCESS, FAILED, CANCELED; empty while none came) and when it arrived;
then each step's command data and reply data. A step whose command waits in
the troubleshooting queue shows IN_TROUBLESHOOTING_QUEUE: `cmdbus tsq
complete` resumes the process, `cmdbus tsq cancel` compensates it.
)",
  {dsn_option,
   dsn_file_option,
   {"--json", "", "print {\"process\": {...}, \"steps\": [...]}"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error (e.g. an invalid PROCESS_ID), 2 unknown
process, 3 database unavailable, 4 other failure.
)"};

const command_spec start_command{
  R"(usage: cmdbus process start DOMAIN TYPE --data JSON|@FILE|-
                            [--batch-id ID] [--create] [--dsn DSN] [--json]

Starts a process of TYPE in DOMAIN: inserts the process and sends its first
step's command in one transaction (the process id is the command's
correlation id; replies go to DOMAIN__process_replies, created when
missing). It prints the process id; `cmdbus worker --domain DOMAIN` drives
the process on.

Types: the demo workflows, which `cmdbus worker` drives in every domain:
  DemoOrder   Reserve -> Charge -> Ship over the demo handler `Test`;
              Release undoes Reserve, Refund undoes Charge. Input:
              {"order_id": "o-1", "charge": "ok" | "declined" | "broken",
               "amount": 100}
              ok: COMPLETED; declined: Charge fails with a business rule,
              Reserve is released, CANCELED; broken: Charge fails
              permanently, the process is WAITING_FOR_TSQ until an
              operator completes (`cmdbus tsq complete`: Ship, COMPLETED)
              or cancels (`cmdbus tsq cancel`: Release, COMPENSATED) the
              command.
)",
  {{"--data", "JSON",
    "the input: a JSON object, @FILE for a file's content, or - for "
    "standard input (required)"},
   {"--batch-id", "ID", "join this PROCESS batch (it must exist)"},
   {"--create", "", "create the domain's command queue if it does not exist"},
   dsn_option,
   dsn_file_option,
   {"--json", "",
    "print {\"process_id\", \"domain\", \"process_type\", \"status\", "
    "\"current_step\"}"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error or invalid input (bad JSON, input the
workflow rejects, an unknown TYPE: the message lists the types), 2 the
domain's queue does not exist (see --create), an unknown batch or one that
is not a PROCESS batch, 3 database unavailable, 4 other failure.
)"};

std::string opt(const std::optional<std::string>& x) {
  return x.value_or("");
}

std::string opt(const std::optional<timestamp>& t) {
  return t ? format_timestamp(*t) : "";
}

std::string upper(std::string x) {
  std::transform(x.begin(), x.end(), x.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  return x;
}

process_status parse_process_status_arg(const std::string& text) {
  auto name = upper(text);
  if (name == "TSQ")
    name = "WAITING_FOR_TSQ";
  if (auto s = parse_process_status(name))
    return *s;
  throw usage_error{
    "--status: unknown process status '" + text
    + "' (choose PENDING, IN_PROGRESS, WAITING, WAITING_FOR_TSQ, "
      "COMPENSATING, COMPLETED, COMPENSATED, FAILED or CANCELED)"};
}

// The demo workflows of `domain`: what `start` can start.
std::shared_ptr<const process_registry>
demo_registry(const std::string& domain) {
  auto r = std::make_shared<process_registry>();
  demo::register_demo_workflows(*r, domain);
  return r;
}

std::string joined(const std::vector<std::string>& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i == 0 ? "" : ", ") + xs[i];
  return out;
}

void write_process(json_out& out, const process_metadata& p) {
  out.begin_object()
    .field("domain", p.domain)
    .field("process_id", p.process_id)
    .field("process_type", p.process_type)
    .field("status", to_string(p.status))
    .field("current_step", p.current_step)
    .field("state", p.state)
    .field("error_code", p.error_code)
    .field("error_message", p.error_message)
    .field("batch_id", p.batch_id)
    .field("created_at", p.created_at)
    .field("updated_at", p.updated_at)
    .field("completed_at", p.completed_at)
    .end_object();
}

// A step of `show`: its audit row and the status of its command now.
struct step_row {
  process_audit_entry entry;
  std::optional<command_status> command;
};

void write_step(json_out& out, const step_row& s) {
  const auto& e = s.entry;
  out.begin_object()
    .field("step_name", e.step_name)
    .field("command_id", e.command_id)
    .field("command_type", e.command_type)
    .field("command_data", e.command_data)
    .key("command_status");
  if (s.command)
    out.value(to_string(*s.command));
  else
    out.null();
  out.field("sent_at", e.sent_at).key("reply_outcome");
  if (e.outcome)
    out.value(to_string(*e.outcome));
  else
    out.null();
  out.field("reply_data", e.reply_data)
    .field("received_at", e.received_at)
    .end_object();
}

int process_list(const args& a) {
  a.expect_positional(1, "DOMAIN");
  auto domain = domain_arg(a);
  process_query q;
  for (auto& s : a.options("--status"))
    q.statuses.push_back(parse_process_status_arg(s));
  q.process_type = a.option("--type");
  q.limit = a.int_option("--limit", 0).value_or(100);
  db::pool pool{pool_options_for(a, 1)};
  process_manager pm{pool, demo_registry(domain)};
  auto ps = pm.list(domain, q);
  if (ps.empty())
    note_if_unknown_domain(pool, domain);
  if (a.flag("--json")) {
    json_out out;
    out.begin_array();
    for (auto& p : ps)
      write_process(out, p);
    out.end_array();
    out.print(std::cout);
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& p : ps)
    rows.push_back({p.process_id.to_string(), p.process_type,
                    std::string{to_string(p.status)}, opt(p.current_step),
                    opt(p.error_code), format_timestamp(p.created_at),
                    format_timestamp(p.updated_at)});
  print_table(std::cout,
              {"process_id", "type", "status", "step", "error", "created_at",
               "updated_at"},
              rows);
  return exit_ok;
}

int process_show(const args& a) {
  a.expect_positional(2, "DOMAIN and PROCESS_ID");
  auto domain = domain_arg(a);
  auto id = parse_uuid_arg("PROCESS_ID", a.positional()[1]);
  db::pool pool{pool_options_for(a, 1)};
  process_manager pm{pool, demo_registry(domain)};
  auto p = pm.get(domain, id);
  if (!p)
    throw not_found{"process " + id.to_string() + " not found in domain "
                    + domain};
  std::vector<step_row> steps;
  {
    command_bus bus{pool};
    for (auto& e : pm.audit_trail(domain, id)) {
      auto m = bus.get_command(domain, e.command_id);
      steps.push_back({e, m ? std::optional{m->status} : std::nullopt});
    }
  }
  if (a.flag("--json")) {
    json_out out;
    out.begin_object().key("process");
    write_process(out, *p);
    out.key("steps").begin_array();
    for (auto& s : steps)
      write_step(out, s);
    out.end_array().end_object();
    out.print(std::cout);
    return exit_ok;
  }
  std::string error;
  if (p->error_code || p->error_message)
    error = opt(p->error_code) + ": " + opt(p->error_message);
  print_fields(std::cout, {
                            {"domain", p->domain},
                            {"process_id", p->process_id.to_string()},
                            {"process_type", p->process_type},
                            {"status", std::string{to_string(p->status)}},
                            {"current_step", opt(p->current_step)},
                            {"state", p->state.text()},
                            {"error", error},
                            {"batch_id", p->batch_id ? p->batch_id->to_string()
                                                     : std::string{}},
                            {"created_at", format_timestamp(p->created_at)},
                            {"updated_at", format_timestamp(p->updated_at)},
                            {"completed_at", opt(p->completed_at)},
                          });
  std::cout << "\nsteps: " << steps.size() << "\n";
  if (steps.empty())
    return exit_ok;
  std::vector<std::vector<std::string>> rows;
  for (auto& s : steps) {
    const auto& e = s.entry;
    rows.push_back(
      {e.step_name, e.command_id.to_string(), e.command_type,
       s.command ? std::string{to_string(*s.command)} : "(no command row)",
       format_timestamp(e.sent_at),
       e.outcome ? std::string{to_string(*e.outcome)} : "",
       opt(e.received_at)});
  }
  print_table(std::cout,
              {"step", "command_id", "type", "command_status", "sent_at",
               "reply", "received_at"},
              rows);
  std::cout << "\n";
  for (auto& s : steps) {
    const auto& e = s.entry;
    std::cout << e.step_name << " command: "
              << (e.command_data ? e.command_data->text() : "null") << "\n";
    if (e.outcome)
      std::cout << e.step_name << " reply:   "
                << (e.reply_data ? e.reply_data->text() : "null") << "\n";
  }
  return exit_ok;
}

int process_start(const args& a) {
  a.expect_positional(2, "DOMAIN and TYPE");
  auto domain = domain_arg(a);
  auto type = a.positional()[1];
  auto registry = demo_registry(domain);
  if (registry->find(domain, type) == nullptr) {
    auto types = registry->types(domain);
    auto near = config::nearest(type, types);
    throw usage_error{"unknown process type '" + type + "'"
                      + (near.empty() ? "" : "; did you mean " + near + "?")
                      + " (the types: " + joined(types) + ")"};
  }
  auto data = a.option("--data");
  if (!data)
    throw usage_error{"--data is required (a JSON object, @FILE or -)"};
  auto input = parse_object_arg("--data", *data);
  std::optional<uuid> batch;
  if (auto b = a.option("--batch-id"))
    batch = parse_uuid_arg("--batch-id", *b);
  db::pool pool{pool_options_for(a, 1)};
  require_queue(pool, db::command_queue(domain), a.flag("--create"));
  process_manager pm{pool, registry};
  uuid id;
  try {
    id = pm.start(domain, type, input, batch);
  } catch (const db::invalid_argument&) {
    throw;
  } catch (const std::invalid_argument& e) {
    // The workflow rejected the input.
    throw usage_error{std::string{"--data: "} + e.what()};
  }
  auto p = pm.get(domain, id);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("process_id", id)
      .field("domain", domain)
      .field("process_type", type)
      .key("status");
    if (p)
      out.value(to_string(p->status));
    else
      out.null();
    out.field("current_step", p ? p->current_step : std::nullopt).end_object();
    out.print(std::cout);
    return exit_ok;
  }
  std::cout << "started " << type << " process " << id.to_string()
            << " in domain " << domain;
  if (p && p->current_step)
    std::cout << " (" << to_string(p->status) << " at step " << *p->current_step
              << ")";
  std::cout << "\n";
  return exit_ok;
}

} // namespace

int run_process(const std::vector<std::string>& argv) {
  return run_subcommand("process", argv, process_command,
                        {{"list", &list_command, process_list},
                         {"show", &show_command, process_show},
                         {"start", &start_command, process_start}});
}

} // namespace cmdbus::cli
