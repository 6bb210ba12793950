// `cmdbus batch`: following batches from the command line (list, show) and
// repairing their counters (refresh). Batches are created with
// `cmdbus send-batch --batch`.

#include <iostream>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/cli/program.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/errors.hpp"

namespace cmdbus::cli {

namespace {

const command_spec batch_command{
  R"(usage: cmdbus batch list DOMAIN [--status S] [--limit N] [--offset N]
       cmdbus batch show DOMAIN BATCH_ID
       cmdbus batch refresh DOMAIN BATCH_ID
       (each also takes --dsn DSN, --json and --help)

Follows the batches of a domain. A batch is created whole, with all its
commands in one transaction, by `cmdbus send-batch DOMAIN --file F --batch`.

  list      the domain's batches, newest first
  show      one batch: counters, status, timestamps, progress, and its
            commands in the troubleshooting queue
  refresh   recounts a batch's counters from its command rows (repair)

Exit codes: 0 ok, 1 usage error, 2 unknown batch, 3 database unavailable,
4 other failure.
)",
  {}};

const command_spec list_command{
  R"(usage: cmdbus batch list DOMAIN [--status S] [--limit N] [--offset N]
                         [--dsn DSN] [--json]

Lists the domain's batches, newest first: id, name, status, finished
commands (completed + failed + canceled) of the total, commands in the
troubleshooting queue, creation time. S is one of PENDING, IN_PROGRESS,
COMPLETED, COMPLETED_WITH_FAILURES (any case). Default limit 100.
)",
  {{"--status", "S", "only batches with this status"},
   {"--limit", "N", "at most N batches (default 100)"},
   {"--offset", "N", "skip the first N"},
   dsn_option,
   dsn_file_option,
   {"--json", "",
    "print an array of batch objects (with `progress`, the finished fraction "
    "0..1)"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error, 3 database unavailable, 4 other failure.
)"};

const command_spec show_command{
  R"(usage: cmdbus batch show DOMAIN BATCH_ID [--dsn DSN] [--json]

Shows a batch: name, custom data, status, every counter, timestamps and
progress (finished commands: completed + failed + canceled, of the total;
a bar when standard output is a terminal), then its commands in the
troubleshooting queue. A batch whose remaining commands all sit in the
troubleshooting queue stays IN_PROGRESS until they are resolved
(`cmdbus tsq`).
)",
  {dsn_option,
   dsn_file_option,
   {"--json", "",
    "print {\"batch\": {... \"progress\": 0..1 ...}, \"troubleshooting\": "
    "[commands]}"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error (e.g. an invalid BATCH_ID), 2 unknown batch,
3 database unavailable, 4 other failure.
)"};

const command_spec refresh_command{
  R"(usage: cmdbus batch refresh DOMAIN BATCH_ID [--dsn DSN] [--json]

Repairs a batch's counters and prints them before and after. The counters
are normally kept up to date as each command finishes; refresh recounts
them from the command rows (the counts of COMPLETED, FAILED, CANCELED and
IN_TROUBLESHOOTING_QUEUE commands with this batch id) and overwrites them.
For this recount commands in the troubleshooting queue count as finished:
when the four counts reach the total, the status becomes
COMPLETED_WITH_FAILURES (anything failed, canceled or in the
troubleshooting queue) or COMPLETED, and completed_at is set. Otherwise a
PENDING batch with anything counted becomes IN_PROGRESS; a finished batch
is never reopened. No audit event is written and no completion callback
runs.
)",
  {dsn_option,
   dsn_file_option,
   {"--json", "", "print {\"before\": {batch}, \"after\": {batch}}"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error (e.g. an invalid BATCH_ID), 2 unknown batch,
3 database unavailable, 4 other failure.
)"};

// The most troubleshooting items `show` lists.
constexpr int max_tsq_listed = 1000;

std::string opt(const std::optional<timestamp>& t) {
  return t ? format_timestamp(*t) : "";
}

int finished(const batch_metadata& b) {
  return b.completed_count + b.failed_count + b.canceled_count;
}

// "7/12", with a bar in front on a terminal: "[#######-----] 7/12".
std::string progress_text(const batch_metadata& b, bool bar) {
  auto done = finished(b);
  auto counts = std::to_string(done) + "/" + std::to_string(b.total_count);
  if (!bar)
    return counts;
  constexpr int width = 30;
  int filled = b.total_count > 0 ? std::min(width, done * width / b.total_count)
                                 : 0;
  return "[" + std::string(static_cast<size_t>(filled), '#')
         + std::string(static_cast<size_t>(width - filled), '-') + "] "
         + counts;
}

// DOMAIN and BATCH_ID of show and refresh.
std::pair<std::string, uuid> domain_and_batch(const args& a) {
  a.expect_positional(2, "DOMAIN and BATCH_ID");
  return {domain_arg(a), parse_uuid_arg("BATCH_ID", a.positional()[1])};
}

batch_metadata existing_batch(command_bus& bus, const std::string& domain,
                              const uuid& id) {
  auto b = bus.get_batch(domain, id);
  if (!b)
    throw batch_not_found_error{domain, id};
  return *b;
}

int batch_list(const args& a) {
  a.expect_positional(1, "DOMAIN");
  auto domain = domain_arg(a);
  std::optional<batch_status> status;
  if (auto s = a.option("--status"))
    status = parse_batch_status_arg("--status", *s);
  auto limit = a.int_option("--limit", 0).value_or(100);
  auto offset = a.int_option("--offset", 0).value_or(0);
  db::pool pool{pool_options_for(a, 1)};
  command_bus bus{pool};
  auto batches = bus.list_batches(domain, status, limit, offset);
  if (batches.empty())
    note_if_unknown_domain(pool, domain);
  if (a.flag("--json")) {
    json_out out;
    out.begin_array();
    for (auto& b : batches)
      write_batch(out, b);
    out.end_array();
    out.print(std::cout);
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& b : batches)
    rows.push_back({b.batch_id.to_string(), b.name.value_or(""),
                    std::string{to_string(b.status)}, progress_text(b, false),
                    std::to_string(b.in_troubleshooting_count),
                    format_timestamp(b.created_at)});
  print_table(
    std::cout,
    {"batch_id", "name", "status", "finished", "in_tsq", "created_at"}, rows);
  return exit_ok;
}

int batch_show(const args& a) {
  auto [domain, id] = domain_and_batch(a);
  db::pool pool{pool_options_for(a, 1)};
  command_bus bus{pool};
  auto b = existing_batch(bus, domain, id);
  auto tsq = bus.list_batch_commands(
    domain, id, command_status::in_troubleshooting_queue, max_tsq_listed);
  if (a.flag("--json")) {
    json_out out;
    out.begin_object().key("batch");
    write_batch(out, b);
    out.key("troubleshooting").begin_array();
    for (auto& m : tsq)
      write_command(out, m);
    out.end_array().end_object();
    out.print(std::cout);
    return exit_ok;
  }
  print_fields(std::cout,
               {
                 {"domain", b.domain},
                 {"batch_id", b.batch_id.to_string()},
                 {"name", b.name.value_or("")},
                 {"custom_data", b.custom_data ? b.custom_data->text() : ""},
                 {"type", b.batch_type},
                 {"status", std::string{to_string(b.status)}},
                 {"progress", progress_text(b, stdout_is_terminal())},
                 {"total", std::to_string(b.total_count)},
                 {"completed", std::to_string(b.completed_count)},
                 {"failed", std::to_string(b.failed_count)},
                 {"canceled", std::to_string(b.canceled_count)},
                 {"in_tsq", std::to_string(b.in_troubleshooting_count)},
                 {"created_at", format_timestamp(b.created_at)},
                 {"started_at", opt(b.started_at)},
                 {"completed_at", opt(b.completed_at)},
               });
  std::cout << "\nin the troubleshooting queue: " << tsq.size() << "\n";
  if (tsq.empty())
    return exit_ok;
  std::vector<std::vector<std::string>> rows;
  for (auto& m : tsq)
    rows.push_back(
      {m.command_id.to_string(), m.command_type,
       std::to_string(m.attempts) + "/" + std::to_string(m.max_attempts),
       m.last_error_code.value_or(""), m.last_error_msg.value_or("")});
  print_table(std::cout,
              {"command_id", "type", "attempts", "last_error", "message"},
              rows);
  return exit_ok;
}

int batch_refresh(const args& a) {
  auto [domain, id] = domain_and_batch(a);
  db::pool pool{pool_options_for(a, 1)};
  command_bus bus{pool};
  auto before = existing_batch(bus, domain, id);
  auto after = bus.refresh_batch(domain, id);
  if (!after)
    throw batch_not_found_error{domain, id};
  if (a.flag("--json")) {
    json_out out;
    out.begin_object().key("before");
    write_batch(out, before);
    out.key("after");
    write_batch(out, *after);
    out.end_object();
    out.print(std::cout);
    return exit_ok;
  }
  auto row = [](const std::string& name, const std::string& x,
                const std::string& y) {
    return std::vector<std::string>{name, x, y, x == y ? "" : "changed"};
  };
  auto num = [](int x) { return std::to_string(x); };
  print_table(
    std::cout, {"field", "before", "after", ""},
    {
      row("status", std::string{to_string(before.status)},
          std::string{to_string(after->status)}),
      row("total", num(before.total_count), num(after->total_count)),
      row("completed", num(before.completed_count),
          num(after->completed_count)),
      row("failed", num(before.failed_count), num(after->failed_count)),
      row("canceled", num(before.canceled_count), num(after->canceled_count)),
      row("in_tsq", num(before.in_troubleshooting_count),
          num(after->in_troubleshooting_count)),
      row("started_at", opt(before.started_at), opt(after->started_at)),
      row("completed_at", opt(before.completed_at), opt(after->completed_at)),
    });
  return exit_ok;
}

} // namespace

int run_batch(const std::vector<std::string>& argv) {
  return run_subcommand("batch", argv, batch_command,
                        {{"list", &list_command, batch_list},
                         {"show", &show_command, batch_show},
                         {"refresh", &refresh_command, batch_refresh}});
}

} // namespace cmdbus::cli
