// End-to-end worker throughput and latency, printed beside the raw PGMQ
// consume ceiling measured in the same run:
//   * raw ceiling: pgmq.read(q, 30, 50) + pgmq.delete(q, ids[]) in a loop;
//   * the worker with a no-op handler over N pre-sent commands (every audit
//     row and status transition of the reference written), at concurrency
//     64 and 16 in non-blocking handler mode, 64 with a prefetch of 64, 64
//     in blocking mode, 64 with the auto prefetch, and the library's
//     default settings (a default worker_config, as `cmdbus worker` runs
//     given none: concurrency 16, prefetch auto) in blocking mode, with
//     worker CPU vs PostgreSQL CPU; `defaults / best` against 0.8x;
//   * the same prefetch phase again with the HTTP endpoint on and scraped
//     (/metrics every 100 ms, the status page every second), printed as a
//     ratio to the phase without it;
//   * the same prefetch phase reading by priority and with a per-type cap
//     (commandbus.cmdbus_read instead of the default read), as ratios too;
//   * delayed commands all becoming due at one instant while the worker
//     idles: how long after that instant the first is taken, and how fast
//     they drain, as a ratio to the prefetch phase's plain commands;
//   * the prefetch phase behind a backlog of commands delayed by a day
//     (sent first), as a ratio to the prefetch phase;
//   * a trivial external program (`cmdbus worker --exec`, a shell script
//     that reads its input and exits 0) beside the in-process no-op handler
//     at the same concurrency and blocking mode, as a same-run ratio;
//   * send->completed latency (server timestamps) at a paced offered load
//     with NOTIFY, and the process's peak RSS against 64 MiB.
//
// Usage: cmdbus-worker-bench [--commands N] [--rate R] [--seconds S]
// (DSN from CMDBUS_DSN)

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "bench/bench_util.hpp"
#include "cmdbus/actors/exec/exec_handler.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

// CPU seconds (user + system) of the whole machine, from /proc/stat.
double machine_cpu() {
  std::ifstream in{"/proc/stat"};
  std::string cpu;
  long long user = 0, nice = 0, sys = 0;
  in >> cpu >> user >> nice >> sys;
  return static_cast<double>(user + nice + sys)
         / static_cast<double>(sysconf(_SC_CLK_TCK));
}

void send_commands(command_bus& bus, const std::string& domain, int n,
                   std::optional<timestamp> not_before = std::nullopt) {
  std::vector<send_request> reqs;
  reqs.reserve(static_cast<size_t>(n));
  auto data = json::parse(R"({"behavior": {}})");
  for (int i = 0; i < n; ++i) {
    send_request r;
    r.domain = domain;
    r.command_type = "Noop";
    r.command_id = uuid::random();
    r.data = data;
    r.not_before = not_before;
    reqs.push_back(std::move(r));
  }
  bus.send_batch(reqs);
}

int64_t count_status(db::connection& c, const std::string& domain,
                     const char* status) {
  return c
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
           "status = $2",
           domain, status)
    .int64(0, 0);
}

// The settings `cmdbus worker` runs with when given none: the library's
// defaults, whatever they are in this build.
config::worker_config default_cfg(const std::string& dsn,
                                  const std::string& domain) {
  config::worker_config cfg;
  cfg.dsn = dsn;
  cfg.domains = {domain};
  return cfg;
}

config::worker_config worker_cfg(const std::string& dsn,
                                 const std::string& domain, int concurrency,
                                 int prefetch = 0) {
  config::worker_config cfg;
  cfg.dsn = dsn;
  cfg.domains = {domain};
  cfg.concurrency = concurrency;
  cfg.prefetch = prefetch;
  cfg.poll_interval = 1000ms;
  return cfg;
}

// Waits until the worker has completed `n` commands or `limit` has passed
// (its counters are cheap to read).
void wait_completed(worker& w, int64_t n, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (w.stats().completed < n
         && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
}

handler_registry noop_registry(const std::string& domain, handler_mode mode) {
  handler_registry reg;
  reg.add(
    domain, "Noop",
    [](const command&, handler_context&) { return json::null(); }, mode);
  return reg;
}

// Runs a worker with `reg` (and `prefetch`) over `n` commands of `domain`
// sent first and returns its rate.
bench::rate drain(const std::string& dsn, command_bus& bus,
                  db::connection& conn, const std::string& domain, int n,
                  int concurrency, handler_registry reg,
                  const std::string& name, int prefetch = 0) {
  send_commands(bus, domain, n);
  bench::settle(conn);
  worker w{worker_cfg(dsn, domain, concurrency, prefetch), std::move(reg)};
  auto start = std::chrono::steady_clock::now();
  w.start();
  wait_completed(w, n, std::chrono::minutes{5});
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - start)
                .count();
  w.stop(10s).get();
  auto done = count_status(conn, domain, "COMPLETED");
  return {name, static_cast<double>(done) / secs, done, secs};
}

const char* mode_name(handler_mode mode) {
  return mode == handler_mode::blocking ? "blocking" : "non-blocking";
}

// Scrapes a worker's endpoint while it lives: /metrics every 100 ms (far
// more often than a Prometheus server would), the status page every second.
class scraper {
public:
  explicit scraper(int port) : thread_([this, port] { run(port); }) {
    // nop
  }

  ~scraper() {
    stop();
  }

  /// Stops scraping; the figures are final afterwards.
  void stop() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
  }

  int64_t scrapes() const noexcept {
    return scrapes_;
  }

  int64_t failures() const noexcept {
    return failures_;
  }

  double mean_ms() const noexcept {
    return scrapes_ > 0 ? total_ms_ / static_cast<double>(scrapes_) : 0;
  }

private:
  void run(int port) {
    httplib::Client client{"127.0.0.1", port};
    client.set_read_timeout(std::chrono::seconds{5});
    int round = 0;
    while (!stop_) {
      auto t0 = std::chrono::steady_clock::now();
      auto res = client.Get(round++ % 10 == 0 ? "/" : "/metrics");
      total_ms_ += std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
      ++scrapes_;
      if (!res || res->status != 200)
        ++failures_;
      std::this_thread::sleep_for(100ms);
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int64_t> scrapes_{0};
  std::atomic<int64_t> failures_{0};
  double total_ms_ = 0;
  std::thread thread_;
};

} // namespace

int main(int argc, char** argv) {
  int commands = bench::int_option(argc, argv, "--commands", 100000);
  int rate = bench::int_option(argc, argv, "--rate", 500);
  int latency_seconds = bench::int_option(argc, argv, "--seconds", 10);
  spdlog::set_level(spdlog::level::warn);
  auto run_id = uuid::random().to_string().substr(0, 8);
  bench::database base;
  auto& dsn = base.dsn;
  auto& bus = base.bus;
  auto& conn = base.conn;
  std::printf(
    "== worker benchmark (synchronous_commit=%s, %d commands)\n",
    conn.exec("SHOW synchronous_commit").opt_text(0, 0).value().c_str(),
    commands);

  // -- raw consume ceiling ---------------------------------------------------
  auto raw_domain = "wraw_" + run_id;
  send_commands(bus, raw_domain, commands);
  bench::settle(conn);
  auto raw_queue = raw_domain + "__commands";
  auto t0 = std::chrono::steady_clock::now();
  int64_t moved = 0;
  for (;;) {
    auto r = conn.query("SELECT msg_id FROM pgmq.read($1, 30, 50)", raw_queue);
    if (r.rows() == 0)
      break;
    std::vector<int64_t> ids;
    for (int i = 0; i < r.rows(); ++i)
      ids.push_back(r.int64(i, 0));
    conn.query("SELECT pgmq.delete($1, $2::bigint[])", raw_queue,
               db::array_literal(ids));
    moved += r.rows();
  }
  auto raw_secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                                - t0)
                    .count();
  bench::rate raw{"raw read(50)+delete ceiling", moved / raw_secs, moved,
                  raw_secs};
  std::printf("-- throughput (no-op handler, all reference writes)\n");
  bench::print(raw);

  // The no-op handler never blocks, so it is registered as non-blocking
  // (run on the scheduler threads); the default blocking mode (a thread per
  // handler slot) is measured too. With a prefetch, the poller reads the
  // next batch while the handlers still run the last one, in reads of up to
  // concurrency + prefetch.
  // The two phases with a read that chooses (docs/scheduling.md) repeat the
  // prefetch phase with priorities on, and with a per-type cap (of a type
  // the load does not have: the read passes its limit), so that they read
  // through commandbus.cmdbus_read instead of the default read
  // (commandbus.cmdbus_read_due).
  enum class chooser { none, priorities, cap };
  struct phase {
    int concurrency;
    int prefetch;
    handler_mode mode;
    const char* tag;
    bool http;
    chooser read = chooser::none;
    // The library's default settings (concurrency and prefetch unused).
    bool defaults = false;
    // Claims every command at its read (deferred claims off).
    bool immediate = false;
  };
  const phase phases[] = {
    {64, 0, handler_mode::non_blocking, "wb64_", false},
    {64, 64, handler_mode::non_blocking, "wb64p_", false},
    {64, 64, handler_mode::non_blocking, "wb64i_", false, chooser::none, false,
     true},
    {64, 64, handler_mode::non_blocking, "wb64h_", true},
    {64, 64, handler_mode::non_blocking, "wb64q_", false, chooser::priorities},
    {64, 64, handler_mode::non_blocking, "wb64c_", false, chooser::cap},
    {16, 0, handler_mode::non_blocking, "wb16_", false},
    {64, 0, handler_mode::blocking, "wb64b_", false},
    // The auto prefetch with the best phase's slots and mode: a candidate
    // for the best configuration too, so that the defaults are compared
    // with the best the worker can do, auto prefetch included.
    {64, config::prefetch_auto, handler_mode::non_blocking, "wb64a_", false},
    {0, 0, handler_mode::blocking, "wbdef_", false, chooser::none, true}};
  bench::rate best;
  bench::rate without_http;
  bench::rate defaults;
  for (auto [concurrency, prefetch, mode, tag, http, read, is_default,
             immediate] :
       phases) {
    auto domain = tag + run_id;
    send_commands(bus, domain, commands);
    bench::settle(conn);
    auto cfg = is_default ? default_cfg(dsn, domain)
                          : worker_cfg(dsn, domain, concurrency, prefetch);
    if (http)
      cfg.http = "127.0.0.1:0";
    cfg.deferred_claims = !immediate;
    if (read == chooser::priorities)
      cfg.scheduling[domain].priorities = true;
    if (read == chooser::cap)
      cfg.scheduling[domain].type_concurrency["Other"] = 8;
    worker w{cfg, noop_registry(domain, mode)};
    auto cpu0 = bench::self_cpu_seconds();
    auto mcpu0 = machine_cpu();
    auto start = std::chrono::steady_clock::now();
    w.start();
    std::unique_ptr<scraper> scraping;
    if (http)
      scraping = std::make_unique<scraper>(w.http_port());
    wait_completed(w, commands, std::chrono::minutes{5});
    auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                              - start)
                  .count();
    auto cpu = bench::self_cpu_seconds() - cpu0;
    auto mcpu = machine_cpu() - mcpu0;
    int64_t scrapes = 0;
    int64_t failed_scrapes = 0;
    double scrape_ms = 0;
    if (scraping) {
      scraping->stop();
      scrapes = scraping->scrapes();
      failed_scrapes = scraping->failures();
      scrape_ms = scraping->mean_ms();
      scraping.reset();
    }
    w.stop(10s).get();
    auto done = count_status(conn, domain, "COMPLETED");
    auto prefetch_text = cfg.prefetch == config::prefetch_auto
                           ? std::string{"prefetch auto, "}
                         : cfg.prefetch > 0
                           ? "prefetch " + std::to_string(cfg.prefetch) + ", "
                           : std::string{};
    auto settings = is_default
                      ? "the defaults (concurrency "
                          + std::to_string(cfg.concurrency) + ", "
                          + prefetch_text + "...), "
                      : "concurrency " + std::to_string(concurrency) + ", "
                          + prefetch_text;
    bench::rate r{"worker, " + settings + mode_name(mode)
                    + (http ? ", HTTP endpoint scraped" : "")
                    + (read == chooser::priorities ? ", read by priority"
                       : read == chooser::cap      ? ", a per-type cap"
                                                   : "")
                    + (immediate ? ", claimed at read" : ""),
                  static_cast<double>(done) / secs, done, secs};
    bench::print(r, &raw);
    std::printf("    CPU: worker %.1f s (%.0f%% of a core), PostgreSQL and "
                "the rest %.1f s, wall %.1f s; %lld of %d COMPLETED\n",
                cpu, 100 * cpu / secs, std::max(0.0, mcpu - cpu), secs,
                static_cast<long long>(done), commands);
    if (http) {
      std::printf("    endpoint: %lld scrapes (%lld failed), mean %.1f ms; "
                  "throughput %.2fx of the same phase without it\n",
                  static_cast<long long>(scrapes),
                  static_cast<long long>(failed_scrapes), scrape_ms,
                  r.per_second / without_http.per_second);
    } else if (immediate) {
      std::printf("    deferred claims: the same phase with them is %.2fx "
                  "of this one\n",
                  without_http.per_second / r.per_second);
    } else if (prefetch > 0 && read == chooser::none && !is_default) {
      without_http = r;
    } else if (read != chooser::none) {
      std::printf("    %.2fx of the same phase with the default read\n",
                  r.per_second / without_http.per_second);
    }
    if (!http && read == chooser::none && !immediate
        && r.per_second > best.per_second)
      best = r;
    if (is_default)
      defaults = r;
  }

  // -- an external program -----------------------------------------------------
  // Each command starts a process (posix_spawn of /bin/sh with a script
  // that reads its input and exits 0), on the blocking handler slots:
  // compared with the in-process no-op handler in the same mode and
  // concurrency over the same number of commands.
  {
    // A process per command costs milliseconds: 1,000 commands at most.
    int n = std::min(commands, 1000);
    int concurrency = 16;
    char script[] = "/tmp/cmdbus-bench-exec-XXXXXX";
    int fd = ::mkstemp(script);
    if (fd >= 0) {
      const char text[] = "#!/bin/sh\ncat > /dev/null\n";
      auto written = ::write(fd, text, sizeof text - 1);
      ::close(fd);
      if (written != static_cast<ssize_t>(sizeof text - 1))
        std::printf("  (cannot write %s)\n", script);
    }
    auto in_process = drain(dsn, bus, conn, "wbx_" + run_id, n, concurrency,
                            noop_registry("wbx_" + run_id,
                                          handler_mode::blocking),
                            "in-process no-op, concurrency 16, blocking");
    handler_registry exec_reg;
    config::exec_config exec_cfg;
    exec_cfg.programs["Noop"] = std::string{"/bin/sh "} + script;
    exec::add_exec_handlers(exec_reg, exec_cfg, "wbe_" + run_id);
    auto external = drain(dsn, bus, conn, "wbe_" + run_id, n, concurrency,
                          std::move(exec_reg),
                          "external program (sh script), concurrency 16");
    ::unlink(script);
    std::printf("-- external handler (cmdbus worker --exec, %d commands)\n",
                n);
    bench::print(in_process);
    bench::print(external, &in_process);
  }

  // -- delayed commands becoming due ------------------------------------------
  // The prefetch phase's worker, started and idle, while a backlog of
  // delayed commands becomes due at one instant (their not-before time).
  // Nothing wakes the worker then (a command becoming due sends no
  // NOTIFY): its next poll finds them, so the first is taken within about
  // one poll interval. The server's timestamps measure both figures.
  bench::settle(conn);
  auto due_domain = "wbd_" + run_id;
  {
    int n = std::min(commands, 20000);
    auto server_now = [&] {
      auto now = conn.exec("SELECT clock_timestamp()::text");
      return *parse_timestamp(now.text(0, 0));
    };
    auto due = server_now() + 4s;
    send_commands(bus, due_domain, n, due);
    bool sent_in_time = server_now() < due;
    worker w{worker_cfg(dsn, due_domain, 64, 64),
             noop_registry(due_domain, handler_mode::non_blocking)};
    w.start();
    wait_completed(w, n, std::chrono::minutes{5});
    w.stop(10s).get();
    auto q = conn.query(
      "SELECT extract(epoch FROM min(updated_at) - $2::timestamptz) * 1000, "
      "extract(epoch FROM max(updated_at) - min(updated_at)), count(*) FROM "
      "commandbus.command WHERE domain = $1 AND status = 'COMPLETED'",
      due_domain, format_timestamp(due));
    auto first_ms = std::stod(std::string{q.text(0, 0)});
    auto drain_secs = std::max(1e-3, std::stod(std::string{q.text(0, 1)}));
    auto done = q.int64(0, 2);
    std::printf("-- delayed commands becoming due (%d due at one instant, "
                "worker idle, concurrency 64, prefetch 64, polling every 1 s)\n",
                n);
    if (!sent_in_time)
      std::printf("  (the send took longer than the 4 s delay: some were "
                  "due before the worker started)\n");
    bench::rate r{"delayed commands, first to last completion",
                  static_cast<double>(done) / drain_secs, done, drain_secs};
    bench::print(r, &raw);
    std::printf("    first taken %.0f ms after they became due; drained at "
                "%.2fx of the same phase with plain commands; %lld of %d "
                "COMPLETED\n",
                first_ms, r.per_second / without_http.per_second,
                static_cast<long long>(done), n);
  }

  // -- plain commands behind commands not due yet ----------------------------
  // The prefetch phase again, with a backlog of commands delayed by a day
  // sent before its plain commands (lower msg_ids, vt tomorrow): a read
  // must take the plain ones without stepping over the delayed ones
  // (docs/performance.md, "Reads in visibility order"). Printed as a ratio
  // to the prefetch phase.
  bench::settle(conn);
  auto ahead_domain = "wbn_" + run_id;
  {
    int ahead = std::min(2 * commands, 100000);
    send_commands(bus, ahead_domain, ahead,
                  not_before_in(std::chrono::hours{24}));
    auto r = drain(dsn, bus, conn, ahead_domain, commands, 64,
                   noop_registry(ahead_domain, handler_mode::non_blocking),
                   "worker, concurrency 64, prefetch 64, behind "
                     + std::to_string(ahead) + " not due",
                   64);
    std::printf("-- plain commands behind %d commands delayed by a day "
                "(%d commands)\n",
                ahead, commands);
    bench::print(r, &raw);
    std::printf("    %.2fx of the same phase with nothing ahead\n",
                r.per_second / without_http.per_second);
  }

  // -- latency at a paced offered load ---------------------------------------
  bench::settle(conn);
  auto lat_domain = "wlat_" + run_id;
  {
    worker w{worker_cfg(dsn, lat_domain, 16),
             noop_registry(lat_domain, handler_mode::blocking)};
    w.start();
    auto total = rate * latency_seconds;
    auto interval = std::chrono::nanoseconds{1000000000LL / rate};
    auto next = std::chrono::steady_clock::now();
    auto data = json::parse(R"({"behavior": {}})");
    for (int i = 0; i < total; ++i) {
      std::this_thread::sleep_until(next);
      next += interval;
      send_request r;
      r.domain = lat_domain;
      r.command_type = "Noop";
      r.command_id = uuid::random();
      r.data = data;
      bus.send(r);
    }
    wait_completed(w, total, 60s);
    w.stop(10s).get();
    auto q = conn.query(
      "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), "
      "percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), count(*) FROM "
      "(SELECT extract(epoch FROM (updated_at - created_at)) * 1000 AS ms "
      "FROM commandbus.command WHERE domain = $1 AND status = 'COMPLETED') t",
      lat_domain);
    std::printf("-- latency send->COMPLETED at %d commands/s offered, NOTIFY "
                "on, blocking handler mode (%lld commands)\n",
                rate, static_cast<long long>(q.int64(0, 2)));
    auto p50 = std::stod(std::string{q.text(0, 0)});
    auto p99 = std::stod(std::string{q.text(0, 1)});
    std::printf("  p50 %.1f ms, p99 %.1f ms\n", p50, p99);
    bench::verdict_at_most("p50 send->completed latency", p50, 5.0, " ms");
    bench::verdict_at_most("p99 send->completed latency", p99, 50.0, " ms");
  }
  bench::print_peak_rss("the benchmark with its workers (every phase)");
  std::printf("-- targets\n");
  std::printf("  best: %s\n", best.name.c_str());
  bench::verdict("worker commands/s (best)", best.per_second, 15000, "");
  std::printf("  ratio to the raw consume ceiling: %.2fx\n",
              best.per_second / raw.per_second);
  std::printf("  defaults / best = %.2fx (%.0f /s / %.0f /s)\n",
              defaults.per_second / best.per_second, defaults.per_second,
              best.per_second);
  bench::verdict("defaults / best", defaults.per_second / best.per_second, 0.8,
                 "x");

  // Leave the database small for the next run.
  for (auto* d : {"wraw_", "wb64_", "wb64p_", "wb64i_", "wb64h_", "wb64q_",
                  "wb64c_", "wb16_", "wb64b_", "wb64a_", "wbdef_", "wbx_", "wbe_",
                  "wbd_", "wbn_", "wlat_"})
    bench::drop_domain(conn, std::string{d} + run_id);
  conn.take_notices();
  return 0;
}
