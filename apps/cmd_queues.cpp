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
  R"(usage: cmdbus queues [--create QUEUE]... [--dsn DSN] [--json]

Shows PGMQ metrics of every queue: length, visible length, age of the newest
and oldest message in seconds, and messages ever sent. With --create, first
creates each QUEUE that does not exist (a domain's command queue is
DOMAIN__commands): the operator's way to provide the queues of a worker
whose role may not create them (`cmdbus grant`).
)",
  {{"--create", "QUEUE",
    "create QUEUE first unless it exists (repeatable; the schema's owner or "
    "an operator role)"},
   dsn_option,
   dsn_file_option,
   {"--json", "", "print a JSON array, one object per queue"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error (e.g. an invalid queue name).
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
  db::pool pool{pool_options_for(a, 1)};
  auto conn = pool.acquire();
  for (auto& q : create)
    db::create_queue(*conn, q);
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
