// The cmdbus side of the peers' benchmark (scripts/bench --peers; the
// harness is bench/peers/run.mjs). It plays the same roles, with the same
// arguments and the same JSON lines on standard output, as the
// graphile-worker and pg-boss sides beside the harness, so that the three
// systems are measured alike:
//
//   cmdbus-peers-bench setup
//       create the command queue of the domain `bench`;
//   cmdbus-peers-bench preload --jobs N
//       send N no-op commands with send_batch (one call);
//   cmdbus-peers-bench consume --config default|best --jobs N --max-seconds S
//       run a worker with a no-op handler until N commands are COMPLETED
//       or S seconds have passed since it became ready; prints
//       {"event":"ready"} once its poller has read, then one result line;
//   cmdbus-peers-bench send --rate R --seconds S
//       send R commands a second for S seconds, one send() each on its
//       schedule (open loop), every command's data stamped with the time
//       just before its send.
//
// The consumer's figures, defined alike on every side:
//   * handled: handler calls; first_us: wall clock (µs since the epoch) of
//     the first call;
//   * once the handler has been called N times, the database is asked
//     every 5 ms how many commands are not COMPLETED; end_us is when none
//     is left (or the deadline); done = N minus what is left;
//   * latencies_us: for each command stamped by `send`, the first
//     handler call's time minus the stamp (both from the same clock);
//   * peak_rss_kib: the process's peak resident set (getrusage), and
//     cpu_s: its CPU time from ready to end_us.
//
// Configurations: `default` is a worker with the library's default
// settings (a default worker_config: concurrency 16 and the auto prefetch
// as of this writing) and a handler registered in the default (blocking) mode,
// like `cmdbus worker`; `best` is concurrency 64,
// prefetch 64 and a non-blocking handler (bench/worker_bench.cpp's
// fastest phase). DSN from CMDBUS_DSN.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "bench/bench_util.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

constexpr const char* domain = "bench";
constexpr const char* stamp_key = "\"sent_us\":";

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

send_request noop_command(const std::string& data) {
  send_request r;
  r.domain = domain;
  r.command_type = "Noop";
  r.command_id = uuid::random();
  r.data = json::parse(data);
  return r;
}

int setup(bench::database& db) {
  db.bus.ensure_queue(std::string{domain} + "__commands");
  return 0;
}

int preload(bench::database& db, int jobs) {
  std::vector<send_request> reqs;
  reqs.reserve(static_cast<size_t>(jobs));
  for (int i = 0; i < jobs; ++i)
    reqs.push_back(noop_command("{}"));
  auto t0 = std::chrono::steady_clock::now();
  db.bus.send_batch(reqs);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();
  std::printf("{\"event\":\"preloaded\",\"jobs\":%d,\"seconds\":%.3f}\n", jobs,
              secs);
  return 0;
}

// Open loop, like the JS sides: 16 threads take the schedule's slots in
// turn, so that a slow send does not lower the offered rate (concurrent
// sends may share a transaction: the bus's group commit).
int send_paced(bench::database& db, int rate, int seconds) {
  constexpr int threads = 16;
  auto total = static_cast<int64_t>(rate) * seconds;
  auto interval = std::chrono::nanoseconds{1000000000LL / rate};
  auto start = std::chrono::steady_clock::now();
  std::atomic<bool> failed{false};
  std::mutex mtx;
  std::vector<int64_t> took_us;
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&, t] {
      try {
        for (int64_t i = t; i < total && !failed; i += threads) {
          std::this_thread::sleep_until(start + i * interval);
          auto t0 = now_us();
          db.bus.send(
            noop_command("{\"sent_us\":" + std::to_string(t0) + "}"));
          auto t1 = now_us();
          std::lock_guard<std::mutex> guard{mtx};
          took_us.push_back(t1 - t0);
        }
      } catch (const std::exception& e) {
        if (!failed.exchange(true))
          std::fprintf(stderr, "cmdbus-peers-bench send: %s\n", e.what());
      }
    });
  for (auto& th : senders)
    th.join();
  if (failed)
    return 1;
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - start)
                .count();
  // One send() call per command (the bus combines concurrent ones itself);
  // how long the calls took, since a send's time counts in the latency.
  std::printf("{\"event\":\"sent\",\"jobs\":%lld,\"seconds\":%.3f,"
              "\"calls\":%lld,\"call_p50_us\":%lld,\"call_p99_us\":%lld,"
              "\"call_max_us\":%lld}\n",
              static_cast<long long>(total), secs,
              static_cast<long long>(total),
              static_cast<long long>(bench::quantile(took_us, 0.5)),
              static_cast<long long>(bench::quantile(took_us, 0.99)),
              static_cast<long long>(bench::quantile(took_us, 1.0)));
  return 0;
}

// What the no-op handler records.
struct tally {
  std::atomic<int64_t> handled{0};
  std::atomic<int64_t> first_us{0};
  std::mutex mtx;
  std::vector<int64_t> latencies_us;

  void record(const command& cmd) {
    auto now = now_us();
    if (handled.fetch_add(1) == 0)
      first_us = now;
    // Only `send` stamps its commands; the preloaded ones are `{}`.
    const auto& text = cmd.data.text();
    auto at = text.find(stamp_key);
    if (at == std::string::npos)
      return;
    auto sent = std::strtoll(text.c_str() + at + std::strlen(stamp_key),
                             nullptr, 10);
    std::lock_guard<std::mutex> guard{mtx};
    latencies_us.push_back(now - sent);
  }
};

int64_t left_in_database(db::connection& conn) {
  return conn
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
           "status <> 'COMPLETED'",
           std::string{domain})
    .int64(0, 0);
}

int consume(bench::database& db, const std::string& config, int jobs,
            int max_seconds) {
  config::worker_config cfg;
  cfg.dsn = db.dsn;
  cfg.domains = {domain};
  auto mode = handler_mode::blocking;
  if (config == "best") {
    cfg.concurrency = 64;
    cfg.prefetch = 64;
    mode = handler_mode::non_blocking;
  } else if (config != "default") {
    std::fprintf(stderr,
                 "cmdbus-peers-bench: unknown --config %s "
                 "(default or best)\n",
                 config.c_str());
    return 1;
  }
  tally seen;
  handler_registry reg;
  reg.add(
    domain, "Noop",
    [&seen](const command& cmd, handler_context&) {
      seen.record(cmd);
      return json::null();
    },
    mode);
  worker w{cfg, std::move(reg)};
  w.start();
  auto ready_deadline = std::chrono::steady_clock::now() + 30s;
  while (!w.is_ready() && std::chrono::steady_clock::now() < ready_deadline)
    std::this_thread::sleep_for(1ms);
  if (!w.is_ready()) {
    std::fprintf(stderr, "cmdbus-peers-bench: the worker was not ready "
                         "within 30 s\n");
    w.stop_now();
    return 1;
  }
  auto cpu0 = bench::self_cpu_seconds();
  auto ready_us = now_us();
  std::printf("{\"event\":\"ready\"}\n");
  std::fflush(stdout);

  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::seconds{max_seconds};
  int64_t left = jobs;
  while (std::chrono::steady_clock::now() < deadline) {
    if (seen.handled.load() >= jobs) {
      left = left_in_database(db.conn);
      if (left == 0)
        break;
      std::this_thread::sleep_for(5ms);
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  auto capped = left != 0;
  if (capped)
    left = left_in_database(db.conn);
  auto end_us = now_us();
  auto cpu = bench::self_cpu_seconds() - cpu0;
  w.stop(10s).get();

  auto first = seen.first_us.load();
  std::string lat;
  {
    std::lock_guard<std::mutex> guard{seen.mtx};
    for (auto v : seen.latencies_us)
      lat += (lat.empty() ? "" : ",") + std::to_string(v);
  }
  std::printf("{\"event\":\"result\",\"handled\":%lld,\"done\":%lld,"
              "\"capped\":%s,\"first_us\":%lld,\"ready_us\":%lld,"
              "\"end_us\":%lld,\"cpu_s\":%.3f,\"peak_rss_kib\":%ld,"
              "\"latencies_us\":[%s]}\n",
              static_cast<long long>(seen.handled.load()),
              static_cast<long long>(jobs - left), capped ? "true" : "false",
              static_cast<long long>(first), static_cast<long long>(ready_us),
              static_cast<long long>(end_us), cpu, bench::peak_rss_kib(),
              lat.c_str());
  return 0;
}

std::string string_option(int argc, char** argv, const std::string& name,
                          const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name)
      return argv[i + 1];
  return fallback;
}

} // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  if (argc < 2) {
    std::fprintf(stderr, "usage: cmdbus-peers-bench setup|preload|consume|send "
                         "[options] (see bench/peers_bench.cpp)\n");
    return 1;
  }
  std::string role = argv[1];
  try {
    bench::database db;
    if (role == "setup")
      return setup(db);
    if (role == "preload")
      return preload(db, bench::int_option(argc, argv, "--jobs", 50000));
    if (role == "send")
      return send_paced(
        db, std::max(1, bench::int_option(argc, argv, "--rate", 500)),
        bench::int_option(argc, argv, "--seconds", 10));
    if (role == "consume")
      return consume(db, string_option(argc, argv, "--config", "default"),
                     bench::int_option(argc, argv, "--jobs", 50000),
                     bench::int_option(argc, argv, "--max-seconds", 20));
    std::fprintf(stderr, "cmdbus-peers-bench: unknown role %s\n", role.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmdbus-peers-bench %s: %s\n", role.c_str(), e.what());
    return 1;
  }
}
