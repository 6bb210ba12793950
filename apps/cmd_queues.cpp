// `cmdbus queues`: the PGMQ metrics of every queue.

#include <iostream>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"

namespace cmdbus::cli {

namespace {

const command_spec queues_command{
  R"(usage: cmdbus queues [--create QUEUE]... [--partitioned]
                     [--partition-interval N|DUR] [--partition-retention N|DUR]
                     [--dsn DSN] [--json]

Shows PGMQ metrics of every queue: length, visible length, age of the newest
and oldest message in seconds, and messages ever sent. With --create, first
creates each QUEUE that does not exist (a domain's command queue is
DOMAIN__commands): the operator's way to provide the queues of a worker
whose role may not create them (`cmdbus grant`).

With --partitioned, the queues created are partitioned by pg_partman: their
table and archive are cut into partitions of --partition-interval message
ids (or of a time, e.g. '1 day'), and partitions older than
--partition-retention are dropped whole by the maintenance (the worker's
housekeeping runner, `cmdbus prune`) once they hold nothing still needed.
It needs the pg_partman extension in the database; cmdbus never creates it
(see docs/operations.md, "Partitioned queues").
)",
  {{"--create", "QUEUE",
    "create QUEUE first unless it exists (repeatable; the schema's owner or "
    "an operator role)"},
   {"--partitioned", "",
    "create the --create queues partitioned (needs the pg_partman extension)"},
   {"--partition-interval", "N|DUR",
    "message ids per partition, or the time a partition covers, e.g. '1 "
    "day' (10000)"},
   {"--partition-retention", "N|DUR",
    "keep partitions back to this many ids below the newest, or this old "
    "(same kind as the interval); 'none' keeps all (100000)"},
   dsn_option,
   dsn_file_option,
   {"--json", "", "print a JSON array, one object per queue"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error (e.g. an invalid queue name, interval or
retention), 4 failed (e.g. --partitioned without the pg_partman extension,
or a queue of that name that is not partitioned; nothing is created).
)"};

} // namespace

int run_queues(const std::vector<std::string>& argv) {
  args a{argv, queues_command};
  if (a.help())
    return print_help(queues_command);
  a.expect_positional(0, "no positional arguments");
  auto create = a.options("--create");
  for (auto& q : create)
    db::validate_queue_name(q);
  auto partitioned = a.flag("--partitioned");
  db::partition_spec spec;
  auto interval = a.option("--partition-interval");
  auto retention = a.option("--partition-retention");
  if (!partitioned && (interval || retention))
    throw usage_error{"--partition-interval and --partition-retention need "
                      "--partitioned"};
  if (partitioned && create.empty())
    throw usage_error{"--partitioned needs --create QUEUE"};
  if (interval)
    spec.interval = *interval;
  if (retention)
    spec.retention = *retention == "none" ? std::nullopt
                                          : std::optional{*retention};
  db::pool pool{pool_options_for(a, 1)};
  auto conn = pool.acquire();
  for (auto& q : create) {
    if (partitioned)
      db::create_partitioned_queue(*conn, q, spec);
    else
      db::create_queue(*conn, q);
  }
  auto r = conn->exec(
    "SELECT queue_name, queue_length, queue_visible_length, "
    "newest_msg_age_sec, oldest_msg_age_sec, total_messages FROM "
    "pgmq.metrics_all() ORDER BY queue_name");
  if (a.flag("--json")) {
    json_out out;
    out.begin_array();
    for (int i = 0; i < r.rows(); ++i) {
      auto num = [&](int c) -> std::optional<int64_t> {
        if (r.is_null(i, c))
          return std::nullopt;
        return std::stoll(std::string{r.text(i, c)});
      };
      out.begin_object()
        .field("queue_name", r.text(i, 0))
        .field("queue_length", num(1))
        .field("queue_visible_length", num(2))
        .field("newest_msg_age_sec", num(3))
        .field("oldest_msg_age_sec", num(4))
        .field("total_messages", num(5))
        .end_object();
    }
    out.end_array();
    out.print(std::cout);
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < r.rows(); ++i) {
    std::vector<std::string> row;
    for (int c = 0; c < 6; ++c)
      row.emplace_back(r.text(i, c));
    rows.push_back(std::move(row));
  }
  print_table(std::cout,
              {"queue", "length", "visible", "newest_age_s", "oldest_age_s",
               "total_sent"},
              rows);
  return exit_ok;
}

} // namespace cmdbus::cli
