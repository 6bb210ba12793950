// `cmdbus prune`: removes finished history older than an age, in chunks,
// over db/retention.hpp (docs/operations.md, "Retention"). Each chunk is a
// transaction of its own under the retention job's advisory lock, which it
// waits for: a worker's housekeeping runner and this command take turns
// chunk by chunk, never prune at the same time.

#include <iostream>
#include <thread>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/jobs.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/retention.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::cli {

namespace {

const command_spec prune_command{
  R"(usage: cmdbus prune --older-than AGE [--domain D] [--dry-run]
                    [--chunk-size N] [--pause DUR] [--dsn DSN] [--json]

Removes history older than AGE: finished commands (COMPLETED, FAILED,
CANCELED) with their audit rows, final processes with their process audit,
final batches that have no commands or processes left, with their audit
rows, and archived queue messages. Never a command that is pending, running
or in the troubleshooting queue, a command or process of a batch that is not
final, a command that a process not yet final refers to, or the archived
message of a command that is still there and not final. Ages count from
when a row became final (its last change; a batch's completion; a message's
archiving).

It works in chunks of at most --chunk-size rows of a kind, each one short
transaction that removes a row together with what belongs to it: stopped at
any moment (Ctrl-C, kill -9), nothing is half removed, and running it again
goes on. Each chunk waits for the retention lock, which a worker's
housekeeping runner ([retention]) holds during its own chunks.

Partitioned queues (`cmdbus queues --create Q --partitioned`) also get
their maintenance, one queue per chunk: partitions created ahead, and
partitions past the queue's own retention (not AGE) dropped whole unless
they hold a message still needed. --dry-run does not count partitions.
)",
  {{"--older-than", "AGE",
    "remove what became final more than AGE ago (a duration: 30d, 12h; "
    "required)"},
   {"--domain", "D",
    "only domain D and the archives of its queues (D__...); default: every "
    "domain and queue"},
   {"--dry-run", "", "count what would be removed; change nothing"},
   {"--chunk-size", "N", "most rows of a kind per transaction (1000)"},
   {"--pause", "DUR", "wait between two chunks (0)"},
   dsn_option,
   {"--json", "",
    "print {dry_run, domain, older_than_ms, chunks, commands, "
    "command_audits, processes, process_audits, batches, batch_audits, "
    "archived_messages, api_requests, partitions_created, "
    "partitions_dropped, partitions_kept}"},
   help_option},
  R"(
Exit codes: 0 done (or counted, with --dry-run), 1 usage error.
)"};

void print_counts(std::ostream& out, const prune_counts& c, bool dry_run) {
  out << (dry_run ? "would remove " : "removed ") << c.commands << " commands ("
      << c.command_audits << " audit rows), " << c.processes << " processes ("
      << c.process_audits << " audit rows), " << c.batches << " batches ("
      << c.batch_audits << " audit rows), " << c.archived_messages
      << " archived messages, " << c.api_requests
      << " API request fingerprints";
  if (!dry_run)
    out << "; partitions: " << c.partitions_created << " created, "
        << c.partitions_dropped << " dropped, " << c.partitions_kept
        << " kept past retention";
}

} // namespace

int run_prune(const std::vector<std::string>& argv) {
  args a{argv, prune_command};
  if (a.help())
    return print_help(prune_command);
  a.expect_positional(0, "no positional arguments");
  auto age = a.duration_option("--older-than");
  if (!age)
    throw usage_error{"--older-than AGE is required (e.g. --older-than 30d)"};
  std::vector<std::string> domains;
  auto domain = a.option("--domain");
  if (domain) {
    db::validate_domain(*domain);
    domains.push_back(*domain);
  }
  auto chunk_size = a.int_option("--chunk-size", 1).value_or(1000);
  auto pause = a.duration_option("--pause").value_or(
    std::chrono::milliseconds{0});
  retention_ages ages{*age, *age, *age, *age};
  auto dry_run = a.flag("--dry-run");

  db::pool pool{pool_options_for(a, 1)};
  auto conn = pool.acquire();
  prune_counts total;
  int64_t chunks = 0;
  if (dry_run) {
    total = db::preview_prune(*conn, domains, ages);
  } else {
    auto lg = log::from("prune");
    db::prune_pass pass{domains, ages, chunk_size};
    while (!pass.done()) {
      if (chunks > 0 && pause.count() > 0)
        std::this_thread::sleep_for(pause);
      auto where = pass.position();
      prune_counts chunk;
      db::run_under_job_lock(*conn, db::retention_job_name,
                             [&](db::connection& c) { chunk = pass.step(c); });
      total += chunk;
      ++chunks;
      lg.debug("chunk {} ({}): {} rows", chunks, where, chunk.total());
    }
  }
  if (a.flag("--json")) {
    json_out out;
    out.begin_object()
      .field("dry_run", dry_run)
      .field("domain", domain)
      .field("older_than_ms", static_cast<int64_t>(age->count()))
      .field("chunks", chunks)
      .field("commands", total.commands)
      .field("command_audits", total.command_audits)
      .field("processes", total.processes)
      .field("process_audits", total.process_audits)
      .field("batches", total.batches)
      .field("batch_audits", total.batch_audits)
      .field("archived_messages", total.archived_messages)
      .field("api_requests", total.api_requests)
      .field("partitions_created", total.partitions_created)
      .field("partitions_dropped", total.partitions_dropped)
      .field("partitions_kept", total.partitions_kept)
      .end_object();
    out.print(std::cout);
  } else {
    print_counts(std::cout, total, dry_run);
    if (!dry_run)
      std::cout << " in " << chunks << " chunk" << (chunks == 1 ? "" : "s");
    std::cout << "\n";
  }
  return exit_ok;
}

} // namespace cmdbus::cli
