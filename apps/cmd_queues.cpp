// `cmdbus queues`: the PGMQ metrics of every queue.

#include <iostream>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/pool.hpp"

namespace cmdbus::cli {

namespace {

const command_spec queues_command{
  R"(usage: cmdbus queues [--dsn DSN] [--json]

Shows PGMQ metrics of every queue: length, visible length, age of the newest
and oldest message in seconds, and messages ever sent.
)",
  {dsn_option,
   dsn_file_option,
   {"--json", "", "print a JSON array, one object per queue"},
   help_option},
  R"(
Exit codes: 0 ok, 1 usage error.
)"};

} // namespace

int run_queues(const std::vector<std::string>& argv) {
  args a{argv, queues_command};
  if (a.help())
    return print_help(queues_command);
  a.expect_positional(0, "no positional arguments");
  db::pool pool{pool_options_for(a, 1)};
  auto conn = pool.acquire();
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
