// Scale-out of the worker: the same number of no-op commands drained by
//   * 1, 2 and 4 `cmdbus worker --demo` processes serving one domain, and
//   * one such process serving 3 domains (a third of the commands each),
// every process at the settings `cmdbus worker` uses by default (the demo
// `Test` handler with an empty behaviour: success at once, in the default
// blocking handler mode).
//
// Each row gets fresh domains. Its processes are started and ready
// (/readyz answers 200: every domain's poller has read) before the
// commands are sent, all of them in one transaction, so that every
// process sees the whole load at once. The rate is the COMPLETED commands
// over the time from the first completion to the last, both from the
// server's clock (commandbus.command.updated_at). The rows run in turn,
// round after round (--rounds, 3 by default: one row takes about a second,
// and a single run of it varies by a third on a shared 2-core machine).
// Printed per row: the median of its rounds in commands/s with each
// round's figure, the ratio of medians to one process (flagged when below
// 1.0x: adding processes or domains should never lower the total), and
// each process's peak RSS (VmHWM, read just before it is stopped) against
// 64 MiB, and per command the server's shared-buffer accesses (hits and
// reads) and committed transactions (pg_stat_database, from the commit of
// the send until every process of the row has exited; the benchmark's
// polling, a look for a message left in the queues, is in the buffers, its
// transactions are not): counts of work that do not move with the
// machine's load, so that a row that costs the server more per command
// shows as such.
//
// Usage: cmdbus-scale-bench [--commands N] [--rounds N] (DSN from CMDBUS_DSN)

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "bench/bench_util.hpp"
#include "bench/chaos/faults.hpp"
#include "bench/chaos/process.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/transaction.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

struct row {
  std::string name;
  int processes = 1;
  int domains = 1;
};

// The worker processes of a row, each logging to a file of its own in
// `dir` and serving its endpoint on a free port; stopped (SIGTERM) by
// stop(), killed on destruction when still running.
class workers {
public:
  workers(const std::string& dsn, const std::vector<std::string>& domains,
          const std::string& dir, const std::string& tag, int count) {
    for (int i = 0; i < count; ++i) {
      auto port = chaos::free_port();
      chaos::process_spec spec;
      spec.argv = {CMDBUS_BINARY, "worker", "--demo", "--http",
                   "127.0.0.1:" + std::to_string(port)};
      for (auto& d : domains) {
        spec.argv.push_back("--domain");
        spec.argv.push_back(d);
      }
      // In the environment, not on the command line: the DSN holds a
      // password.
      spec.env = {"CMDBUS_DSN=" + dsn};
      spec.log_path = dir + "/" + tag + "-" + std::to_string(i + 1) + ".log";
      ports_.push_back(port);
      logs_.push_back(spec.log_path);
      procs_.push_back(chaos::child::start(spec));
    }
  }

  /// Waits until every process answers 200 on /readyz; throws when one
  /// exits or is not ready within `limit`.
  void wait_ready(std::chrono::seconds limit) {
    auto deadline = steady::now() + limit;
    for (size_t i = 0; i < procs_.size(); ++i) {
      httplib::Client client{"127.0.0.1", ports_[i]};
      client.set_connection_timeout(1s);
      client.set_read_timeout(2s);
      for (;;) {
        if (!procs_[i].running())
          throw std::runtime_error(
            "worker " + std::to_string(i + 1) + " exited with code "
            + std::to_string(procs_[i].exit_code().value_or(-1)) + ": "
            + chaos::tail_of(logs_[i], 5));
        auto res = client.Get("/readyz");
        if (res && res->status == 200)
          break;
        if (steady::now() > deadline)
          throw std::runtime_error(
            "worker " + std::to_string(i + 1) + " was not ready within "
            + std::to_string(limit.count()) + " s (log: " + logs_[i] + ")");
        std::this_thread::sleep_for(20ms);
      }
    }
  }

  /// The peak RSS of every process so far, in MiB.
  std::vector<double> peak_rss_mib() const {
    std::vector<double> out;
    for (auto& p : procs_)
      out.push_back(static_cast<double>(bench::peak_rss_kib_of(p.pid()))
                    / 1024);
    return out;
  }

  /// Stops every process with SIGTERM; returns one line per process that
  /// had exited before, did not exit within `timeout` (killed) or exited
  /// with an error.
  std::vector<std::string> stop(std::chrono::milliseconds timeout) {
    std::vector<std::string> problems;
    for (size_t i = 0; i < procs_.size(); ++i) {
      if (!procs_[i].running())
        problems.push_back("worker " + std::to_string(i + 1)
                           + " had exited before it was stopped (log: "
                           + logs_[i] + ")");
      else
        procs_[i].signal(SIGTERM);
    }
    for (size_t i = 0; i < procs_.size(); ++i) {
      if (procs_[i].exit_code())
        continue;
      auto code = procs_[i].wait_for(timeout);
      if (!code) {
        procs_[i].kill_now();
        problems.push_back("worker " + std::to_string(i + 1)
                           + " did not exit within the stop timeout (killed)");
      } else if (*code != 0) {
        problems.push_back("worker " + std::to_string(i + 1)
                           + " exited with code " + std::to_string(*code)
                           + " (log: " + logs_[i] + ")");
      }
    }
    return problems;
  }

private:
  std::vector<int> ports_;
  std::vector<std::string> logs_;
  std::vector<chaos::child> procs_;
};

// Sends `n` no-op commands spread evenly over `domains` in one transaction.
void send_all(bench::database& db, const std::vector<std::string>& domains,
              int n) {
  std::vector<send_request> reqs;
  reqs.reserve(static_cast<size_t>(n));
  auto data = json::parse(R"({"behavior": {}})");
  for (int i = 0; i < n; ++i) {
    send_request r;
    r.domain = domains[static_cast<size_t>(i) % domains.size()];
    r.command_type = "Test";
    r.command_id = uuid::random();
    r.data = data;
    reqs.push_back(std::move(r));
  }
  db::transaction tx{db.conn};
  db.bus.send_batch(reqs, db.conn);
  tx.commit();
}

std::string joined(const std::vector<std::string>& domains) {
  std::string out;
  for (auto& d : domains)
    out += (out.empty() ? "" : ",") + d;
  return out;
}

// Whether a message is left in any of the domains' command queues. A
// command's message is deleted in the transaction that completes it, so
// this is the cheap first sign of the end: it stops at the first live row
// of each queue, where counting the commands reads every row of the
// domains, and that poll, every few milliseconds, took a share of the CPU
// the workers were measured on.
bool messages_left(db::connection& conn,
                   const std::vector<std::string>& domains) {
  std::string sql = "SELECT ";
  for (size_t i = 0; i < domains.size(); ++i)
    sql += std::string{i ? " OR " : ""} + "EXISTS (SELECT 1 FROM pgmq.q_"
           + db::command_queue(domains[i]) + ")";
  return conn.exec(sql).boolean(0, 0);
}

int64_t left(db::connection& conn, const std::vector<std::string>& domains) {
  return conn
    .query("SELECT count(*) FROM commandbus.command WHERE domain = "
           "ANY(string_to_array($1, ',')) AND status <> 'COMPLETED'",
           joined(domains))
    .int64(0, 0);
}

// The benchmark database's counters so far, with this session's own
// counts flushed first.
struct server_work {
  int64_t buffers = 0; // shared-buffer hits and reads
  int64_t commits = 0; // committed transactions
};

server_work server_work_so_far(db::connection& conn) {
  conn.query("SELECT pg_stat_force_next_flush()");
  auto r = conn.query("SELECT blks_hit + blks_read, xact_commit FROM "
                      "pg_stat_database WHERE datname = current_database()");
  return {r.int64(0, 0), r.int64(0, 1)};
}

// One row measured once: its rate, the server's work per command, each
// process's peak RSS, the commands not completed in time and what went
// wrong when stopping.
struct measurement {
  bench::rate rate;
  double buffers_per_command = 0;
  double commits_per_command = 0;
  std::vector<double> rss;
  int64_t remaining = 0;
  std::vector<std::string> problems;
};

measurement measure(bench::database& db, const row& r,
                    const std::vector<std::string>& domains,
                    const std::string& dir, const std::string& tag,
                    int commands) {
  bench::settle(db.conn);
  workers procs{db.dsn, domains, dir, tag, r.processes};
  procs.wait_ready(30s);
  send_all(db, domains, commands);
  auto before = server_work_so_far(db.conn);
  auto deadline = steady::now() + 120s;
  measurement m;
  int64_t polls = 0;
  for (;;) {
    ++polls;
    auto out_of_time = steady::now() >= deadline;
    if (out_of_time || !messages_left(db.conn, domains)) {
      ++polls;
      m.remaining = left(db.conn, domains);
      if (m.remaining <= 0 || out_of_time)
        break;
    }
    std::this_thread::sleep_for(20ms);
  }
  m.rss = procs.peak_rss_mib();
  m.problems = procs.stop(15s);
  // The exited processes' backends have flushed their counts.
  auto after = server_work_so_far(db.conn);
  auto per_command = [&](int64_t n) {
    return static_cast<double>(n) / std::max(1, commands);
  };
  m.buffers_per_command = per_command(after.buffers - before.buffers);
  // Less the benchmark's own polls (a transaction each).
  m.commits_per_command
    = per_command(after.commits - before.commits - polls);
  auto q = db.conn.query(
    "SELECT count(*), coalesce(extract(epoch FROM max(updated_at) - "
    "min(updated_at)), 0) FROM commandbus.command WHERE domain = "
    "ANY(string_to_array($1, ',')) AND status = 'COMPLETED'",
    joined(domains));
  auto done = q.int64(0, 0);
  auto secs = std::max(1e-3, std::stod(std::string{q.text(0, 1)}));
  m.rate = {r.name, static_cast<double>(done) / secs, done, secs};
  return m;
}

// The median of `v` (not empty).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(int argc, char** argv) {
  int commands = bench::int_option(argc, argv, "--commands", 9000);
  int rounds = std::max(1, bench::int_option(argc, argv, "--rounds", 3));
  auto started = steady::now();
  auto run_id = uuid::random().to_string().substr(0, 8);
  bench::database db;
  auto dir = bench::temp_dir("cmdbus-scale-bench");
  std::printf("== scale-out benchmark (`cmdbus worker --demo` processes at "
              "its default settings, %d no-op commands per row sent in one "
              "transaction once every process is ready; rate from the first "
              "completion to the last; %d rounds of every row in turn, each "
              "row's median)\n",
              commands, rounds);
  const std::vector<row> rows = {{"1 process, 1 domain", 1, 1},
                                 {"2 processes, 1 domain", 2, 1},
                                 {"4 processes, 1 domain", 4, 1},
                                 {"1 process, 3 domains (a third each)", 1, 3}};
  // Rounds outside, rows inside: a drift of the shared machine's load
  // reaches every row alike, and one disturbed run moves no median.
  std::vector<std::vector<measurement>> runs(rows.size());
  std::vector<std::string> all_domains;
  for (int round = 1; round <= rounds; ++round) {
    for (size_t i = 0; i < rows.size(); ++i) {
      auto tag = "r" + std::to_string(round) + "row" + std::to_string(i + 1);
      std::vector<std::string> domains;
      for (int d = 0; d < rows[i].domains; ++d) {
        domains.push_back("sc" + tag + "_" + run_id + "_"
                          + std::to_string(d + 1));
        db.bus.ensure_queue(domains.back() + "__commands");
        all_domains.push_back(domains.back());
      }
      runs[i].push_back(measure(db, rows[i], domains, dir, tag, commands));
    }
  }
  double lowest_ratio = 1e9;
  double highest_rss = 0;
  bench::rate one;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> rates;
    std::vector<double> buffers;
    std::vector<double> commits;
    std::string each;
    int64_t items = 0;
    double secs = 0;
    for (auto& m : runs[i]) {
      rates.push_back(m.rate.per_second);
      buffers.push_back(m.buffers_per_command);
      commits.push_back(m.commits_per_command);
      items += m.rate.items;
      secs += m.rate.seconds;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.0f", each.empty() ? "" : ", ",
                    m.rate.per_second);
      each += buf;
    }
    bench::rate result{rows[i].name, median(rates), items, secs};
    if (i == 0) {
      one = result;
      bench::print(result);
    } else {
      bench::print(result, &one);
      lowest_ratio = std::min(lowest_ratio, result.per_second / one.per_second);
    }
    for (auto& m : runs[i])
      for (auto v : m.rss)
        highest_rss = std::max(highest_rss, v);
    std::string rss_text;
    for (auto v : runs[i].back().rss) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.1f", rss_text.empty() ? "" : ", ", v);
      rss_text += buf;
    }
    std::printf("    each round: %s /s; per command (medians): %.0f server "
                "buffer accesses, %.3f transactions; peak RSS per process "
                "(last round): %s MiB%s\n",
                each.c_str(), median(buffers), median(commits),
                rss_text.c_str(),
                i > 0 && result.per_second < one.per_second
                  ? "; BELOW 1.0x of one process"
                  : "");
    for (auto& m : runs[i]) {
      if (m.remaining > 0)
        std::printf("    %lld of %d not COMPLETED after 120 s\n",
                    static_cast<long long>(m.remaining), commands);
      for (auto& p : m.problems)
        std::printf("    (%s)\n", p.c_str());
    }
    std::fflush(stdout);
  }
  std::printf("-- targets\n");
  bench::verdict("lowest other row / one process (medians)", lowest_ratio, 1.0,
                 "x");
  bench::verdict_at_most("peak RSS of each worker process", highest_rss,
                         bench::rss_target_mib, " MiB");
  bench::print_peak_rss("the benchmark (it sends)");
  std::printf("  benchmark took %.0f s\n",
              std::chrono::duration<double>(steady::now() - started).count());

  // Leave the database small for the next run.
  for (auto& d : all_domains)
    bench::drop_domain(db.conn, d);
  db.conn.take_notices();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmdbus-scale-bench: %s\n", e.what());
    return 1;
  }
}
