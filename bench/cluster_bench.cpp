// Remote handler pools: what running the handlers on handler nodes
// (`cmdbus node --demo`, separate processes reached over CAF's middleman on
// 127.0.0.1) costs against running them in the worker, with handlers that
// wait 5 ms each (I/O-like: the demo `Test` handler with a fixed duration):
//   * commands per second over N pre-sent commands with the same total
//     handler slots: local only (concurrency 16), one node with 16 slots,
//     two nodes with 8 each; printed side by side with the ratio to local;
//   * send->COMPLETED latency at a paced offered load, local vs one node,
//     and the difference: what the remote hop adds.
// The worker runs in this process; in the remote phases its registry has
// no `Test` handler (one idle local slot for a type never sent), so every
// command goes to the nodes. PostgreSQL, the worker and the nodes share the
// machine's cores: the remote figures include that contention.
//
// Usage: cmdbus-cluster-bench [--commands N] [--rate R] [--seconds S]
// (DSN from CMDBUS_DSN)

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "apps/demo_handlers.hpp"
#include "bench/bench_util.hpp"
#include "bench/chaos/faults.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

constexpr int total_slots = 16;
const char* const behavior
  = R"({"behavior": {"min_duration_ms": 5, "max_duration_ms": 5}})";

send_request test_command(const std::string& domain) {
  send_request r;
  r.domain = domain;
  r.command_type = "Test";
  r.command_id = uuid::random();
  r.data = json::parse(behavior);
  return r;
}

// How one phase runs its handlers: in the worker, or on `nodes` handler
// nodes with `slots` each.
struct shape {
  std::string name;
  std::string tag;
  int nodes = 0;
  int slots = 0;
};

// The handler nodes of a phase, started for its domain; stopped (SIGTERM)
// on destruction.
class nodes_of {
public:
  nodes_of(const shape& s, const std::string& domain, const std::string& dir) {
    if (s.nodes == 0)
      return;
    chaos::tools t{CMDBUS_BINARY, "", ""};
    fleet_ = std::make_unique<chaos::node_fleet>(
      t, std::vector<std::string>{domain}, dir, s.nodes, s.slots);
    fleet_->start_all();
  }
  ~nodes_of() {
    if (fleet_)
      for (auto& p : fleet_->stop_all(10s))
        std::printf("    (%s)\n", p.c_str());
  }
  std::vector<std::string> addresses() const {
    return fleet_ ? fleet_->addresses() : std::vector<std::string>{};
  }

private:
  std::unique_ptr<chaos::node_fleet> fleet_;
};

// A worker of `domain` shaped as `s`, started, and (with nodes) connected
// to all of them.
std::unique_ptr<worker> start_worker(const std::string& dsn,
                                     const std::string& domain,
                                     const shape& s,
                                     const std::vector<std::string>& pools) {
  config::worker_config cfg;
  cfg.dsn = dsn;
  cfg.domains = {domain};
  cfg.poll_interval = 1000ms;
  handler_registry reg;
  if (s.nodes == 0) {
    cfg.concurrency = total_slots;
    demo::register_test_handler(reg, domain);
  } else {
    cfg.concurrency = 1;
    reg.add(domain, "Unused",
            [](const command&, handler_context&) { return json::null(); });
    cfg.remote.pools = pools;
    cfg.remote.reconnect_max = 500ms;
  }
  auto w = std::make_unique<worker>(cfg, std::move(reg));
  w->start();
  auto deadline = steady::now() + 30s;
  while (s.nodes > 0
         && w->metrics().at(0)->remote_pools.load() < s.nodes
         && steady::now() < deadline)
    std::this_thread::sleep_for(2ms);
  if (s.nodes > 0 && w->metrics().at(0)->remote_pools.load() < s.nodes)
    throw std::runtime_error("the worker did not connect to its nodes");
  return w;
}

struct latency {
  double p50 = 0;
  double p99 = 0;
  int64_t count = 0;
};

} // namespace

int main(int argc, char** argv) {
  int commands = bench::int_option(argc, argv, "--commands", 5000);
  int rate = bench::int_option(argc, argv, "--rate", 500);
  int latency_seconds = bench::int_option(argc, argv, "--seconds", 3);
  // The worker warns when a phase's nodes stop under it; figures only.
  spdlog::set_level(spdlog::level::err);
  auto run_id = uuid::random().to_string().substr(0, 8);
  auto dir = bench::temp_dir("cmdbus-cluster-bench");
  bench::database base;
  auto& dsn = base.dsn;
  auto& bus = base.bus;
  auto& conn = base.conn;
  std::vector<std::string> domains;
  auto started = steady::now();

  std::printf("== remote handler pools benchmark (handlers wait 5 ms each; "
              "%d handler slots in every shape)\n",
              total_slots);
  std::printf("  nproc %ld: PostgreSQL, the worker and the nodes share these "
              "cores, so the remote figures include their contention\n",
              sysconf(_SC_NPROCESSORS_ONLN));

  // -- throughput ------------------------------------------------------------
  const std::vector<shape> shapes{
    {"local only (concurrency 16)", "cbl_", 0, 0},
    {"1 node x 16 slots", "cb1_", 1, 16},
    {"2 nodes x 8 slots", "cb2_", 2, 8}};
  std::printf("-- throughput over %d pre-sent commands\n", commands);
  bench::rate local;
  for (auto& s : shapes) {
    auto domain = s.tag + run_id;
    domains.push_back(domain);
    std::vector<send_request> reqs;
    reqs.reserve(static_cast<size_t>(commands));
    for (int i = 0; i < commands; ++i)
      reqs.push_back(test_command(domain));
    bus.send_batch(reqs);
    bench::settle(conn);
    nodes_of nodes{s, domain, dir};
    auto w = start_worker(dsn, domain, s, nodes.addresses());
    auto t0 = steady::now();
    auto deadline = t0 + 120s;
    while (w->stats().completed < commands && steady::now() < deadline)
      std::this_thread::sleep_for(2ms);
    auto secs = std::chrono::duration<double>(steady::now() - t0).count();
    auto done = w->stats().completed;
    w->stop(10s).get();
    bench::rate r{s.name, static_cast<double>(done) / secs, done, secs};
    if (s.nodes == 0) {
      local = r;
      bench::print(r);
    } else {
      bench::print(r, &local);
    }
    if (done < commands)
      std::printf("    only %lld of %d completed within 120 s\n",
                  static_cast<long long>(done), commands);
  }

  // -- latency ---------------------------------------------------------------
  // Two rounds of local then remote, each over half the time, so that a
  // drift of the machine during the run weighs on both alike.
  std::printf("-- latency send->COMPLETED at %d commands/s offered for %d s "
              "per shape, in two alternating rounds (server timestamps)\n",
              rate, latency_seconds);
  latency lat[2];
  std::vector<std::string> lat_domains[2];
  for (int round = 0; round < 2; ++round)
    for (int k = 0; k < 2; ++k) {
      auto& s = shapes[static_cast<size_t>(k)];
      auto domain = "cbt" + std::to_string(k) + std::to_string(round) + "_"
                    + run_id;
      domains.push_back(domain);
      lat_domains[k].push_back(domain);
      bus.ensure_queue(domain + "__commands");
      bench::settle(conn);
      nodes_of nodes{s, domain, dir};
      auto w = start_worker(dsn, domain, s, nodes.addresses());
      auto total = std::max(1, rate * latency_seconds / 2);
      auto interval = std::chrono::nanoseconds{1000000000LL / rate};
      auto next = steady::now();
      for (int i = 0; i < total; ++i) {
        std::this_thread::sleep_until(next);
        next += interval;
        bus.send(test_command(domain));
      }
      auto deadline = steady::now() + 60s;
      while (w->stats().completed < total && steady::now() < deadline)
        std::this_thread::sleep_for(2ms);
      w->stop(10s).get();
    }
  for (int k = 0; k < 2; ++k) {
    auto& s = shapes[static_cast<size_t>(k)];
    auto q = conn.query(
      "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), "
      "percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), count(*) FROM "
      "(SELECT extract(epoch FROM (updated_at - created_at)) * 1000 AS ms "
      "FROM commandbus.command WHERE domain IN ($1, $2) AND status = "
      "'COMPLETED') t",
      lat_domains[k][0], lat_domains[k][1]);
    if (q.is_null(0, 0)) {
      std::printf("  %-28s no command completed\n", s.name.c_str());
      continue;
    }
    lat[k] = {std::stod(std::string{q.text(0, 0)}),
              std::stod(std::string{q.text(0, 1)}), q.int64(0, 2)};
    std::printf("  %-28s p50 %6.1f ms, p99 %6.1f ms (%lld commands)\n",
                s.name.c_str(), lat[k].p50, lat[k].p99,
                static_cast<long long>(lat[k].count));
  }
  std::printf("  added by the remote hop: p50 %+.1f ms, p99 %+.1f ms (the "
              "5 ms of the handler are in both)\n",
              lat[1].p50 - lat[0].p50, lat[1].p99 - lat[0].p99);
  bench::print_peak_rss("the benchmark with its worker (the local handlers)");
  std::printf("  benchmark took %.0f s\n",
              std::chrono::duration<double>(steady::now() - started).count());

  // Leave the database small for the next run.
  for (auto& d : domains)
    bench::drop_domain(conn, d);
  conn.take_notices();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
