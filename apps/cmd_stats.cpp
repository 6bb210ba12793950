// `cmdbus stats`: commands by status, queue depth and throughput per
// domain, once or --watch.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "apps/output.hpp"
#include "apps/values.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/cli/program.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/stats.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::cli {

namespace {

const command_spec stats_command{
  R"(usage: cmdbus stats [DOMAIN] [--watch] [--interval DUR] [--dsn DSN] [--json]

Shows per domain (every domain with commands or a DOMAIN__commands queue
when DOMAIN is omitted):
  * commands by status (every status, zeros included); `tsq` is the size of
    the troubleshooting queue (status IN_TROUBLESHOOTING_QUEUE);
  * the command queue: messages in it (`queued`), how many a worker may read
    now (`visible`), how many belong to delayed commands not due yet
    (`scheduled`: never read, invisible until their not-before time; not
    part of the backlog), how many are held by a worker or wait for a retry
    (`invisible`), and the age of the oldest visible message since it was
    enqueued (`oldest`; it grows when the workers fall behind);
  * what finished in the last minute and hour: commands that are COMPLETED
    now (`done`), or FAILED or in the troubleshooting queue now (`failed`),
    and whose row was last updated within that time (the finish, unless an
    operator acted on the command later).
)",
  {{"--watch", "",
    "redraw every --interval until SIGINT (Ctrl-C). On a terminal the screen "
    "is cleared and redrawn; when standard output is not a terminal, one "
    "snapshot is printed per interval (a line with the time, then the "
    "tables; with --json one document per line), so that it can be logged. "
    "When the database goes away while watching, the snapshot says so and "
    "the next interval tries again"},
   {"--interval", "DUR",
    "time between snapshots of --watch (default 2s; e.g. 500ms, 10s, 1m)"},
   {"--json", "",
    "print one JSON document: an array of domain objects with domain, "
    "commands {STATUS: n, ...}, tsq, queue {exists, depth, visible, "
    "scheduled, invisible, oldest_visible_age_sec}, completed_last_minute, "
    "completed_last_hour, failed_last_minute, failed_last_hour"},
   dsn_option,
   dsn_file_option,
   help_option},
  R"(
Cost: the counts use the command table's indexes; only the COMPLETED count
grows with the table (an index-only count of the domain's rows), see
docs/inspect.md.

Exit codes: 0 ok (also when SIGINT ends --watch), 1 usage error,
3 database unavailable, 4 other failure.
)"};

volatile std::sig_atomic_t interrupted = 0;

extern "C" void on_interrupt(int) {
  interrupted = 1;
}

std::string age(const std::optional<double>& seconds) {
  if (!seconds)
    return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", *seconds);
  return buf;
}

void print_json(std::ostream& os, const std::vector<db::domain_stats>& xs) {
  json_out out;
  out.begin_array();
  for (auto& st : xs) {
    out.begin_object()
      .field("domain", st.domain)
      .key("commands")
      .begin_object();
    for (auto s : db::all_command_statuses)
      out.field(to_string(s), st.count(s));
    out.end_object()
      .field("tsq", st.tsq())
      .key("queue")
      .begin_object()
      .field("exists", st.queue_exists)
      .field("depth", st.queue_depth)
      .field("visible", st.visible)
      .field("scheduled", st.scheduled)
      .field("invisible", st.invisible)
      .field("oldest_visible_age_sec", st.oldest_visible_age_sec)
      .end_object()
      .field("completed_last_minute", st.completed_last_minute)
      .field("completed_last_hour", st.completed_last_hour)
      .field("failed_last_minute", st.failed_last_minute)
      .field("failed_last_hour", st.failed_last_hour)
      .end_object();
  }
  out.end_array();
  out.print(os);
}

void print_text(std::ostream& os, const std::vector<db::domain_stats>& xs) {
  if (xs.empty()) {
    os << "no domains (no commands and no command queues)\n";
    return;
  }
  std::vector<std::vector<std::string>> commands;
  std::vector<std::vector<std::string>> queues;
  for (auto& st : xs) {
    std::vector<std::string> row{st.domain};
    for (auto s : db::all_command_statuses)
      row.push_back(std::to_string(st.count(s)));
    commands.push_back(std::move(row));
    queues.push_back(
      {st.domain, st.queue_exists ? std::to_string(st.queue_depth) : "-",
       st.queue_exists ? std::to_string(st.visible) : "-",
       st.queue_exists ? std::to_string(st.scheduled) : "-",
       st.queue_exists ? std::to_string(st.invisible) : "-",
       age(st.oldest_visible_age_sec), std::to_string(st.completed_last_minute),
       std::to_string(st.failed_last_minute),
       std::to_string(st.completed_last_hour),
       std::to_string(st.failed_last_hour)});
  }
  print_table(os,
              {"domain", "pending", "in_progress", "completed", "failed",
               "canceled", "tsq"},
              commands);
  os << '\n';
  print_table(os,
              {"domain", "queued", "visible", "scheduled", "invisible",
               "oldest", "done_1m", "failed_1m", "done_1h", "failed_1h"},
              queues);
}

} // namespace

int run_stats(const std::vector<std::string>& argv) {
  args a{argv, stats_command};
  if (a.help())
    return print_help(stats_command);
  if (a.positional().size() > 1)
    a.expect_positional(1, "at most one DOMAIN");
  std::optional<std::string> domain;
  if (!a.positional().empty())
    domain = domain_arg(a);
  auto interval
    = a.duration_option("--interval").value_or(std::chrono::milliseconds{2000});
  if (a.option("--interval") && !a.flag("--watch"))
    throw usage_error{"--interval needs --watch"};
  if (interval < std::chrono::milliseconds{100})
    throw usage_error{"--interval must be at least 100ms"};
  bool json = a.flag("--json");
  db::pool pool{pool_options_for(a, 1)};
  auto snapshot = [&] {
    auto conn = pool.acquire();
    return domain ? db::collect_stats(*conn, {*domain})
                  : db::collect_stats(*conn);
  };
  if (!a.flag("--watch")) {
    auto xs = snapshot();
    json ? print_json(std::cout, xs) : print_text(std::cout, xs);
    return exit_ok;
  }
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  bool redraw = stdout_is_terminal() && !json;
  bool shown = false;
  while (interrupted == 0) {
    std::vector<db::domain_stats> xs;
    std::string problem;
    try {
      xs = snapshot();
    } catch (const db::error& e) {
      // Once running, an outage is shown and the next interval tries again
      // (the pool reconnects with backoff); at start it is the exit code.
      if (e.code() != db::errc::connection || !shown)
        throw;
      problem = log::one_line(e.what());
    }
    auto now = std::chrono::time_point_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now());
    if (redraw)
      std::cout << "\033[H\033[2J"
                << "cmdbus stats, every " << interval.count()
                << "ms (Ctrl-C ends) " << format_timestamp(now) << "\n\n";
    else if (!json)
      std::cout << "-- " << format_timestamp(now) << '\n';
    if (!problem.empty())
      (json ? std::cerr : std::cout)
        << "database unavailable (" << problem << "); trying again\n";
    else
      json ? print_json(std::cout, xs) : print_text(std::cout, xs);
    std::cout.flush();
    shown = true;
    auto until = std::chrono::steady_clock::now() + interval;
    while (interrupted == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }
  return exit_ok;
}

} // namespace cmdbus::cli
