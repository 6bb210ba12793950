// The command API's send path beside the C++ one, in the same run: 4
// client threads send commands through POST /v1/domains/{d}/commands (each
// on a keep-alive loopback connection of its own) and through
// command_bus::send on the same database, alternately in slices; prints
// each throughput, its p99 latency, and the API's ratio to the C++ path.
// Bounded in time (--seconds, default 3, per side) and count (--max, at
// most 20000 commands per side).
//
// Usage: cmdbus-api-bench [--seconds N] [--max N]   (DSN from CMDBUS_DSN)

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <thread>

#include <httplib.h>

#include "api/command_api.hpp"
#include "bench/bench_util.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int threads = 4;
const std::string payload = R"({"amount": 100, "currency": "EUR"})";

/// Latencies of one side, per thread (no lock on the hot path).
struct latencies {
  std::vector<std::vector<double>> per_thread
    = std::vector<std::vector<double>>(threads);

  double p99_ms() const {
    std::vector<double> all;
    for (auto& v : per_thread)
      all.insert(all.end(), v.begin(), v.end());
    if (all.empty())
      return 0;
    auto at = all.begin()
              + static_cast<std::ptrdiff_t>(0.99 * (all.size() - 1));
    std::nth_element(all.begin(), at, all.end());
    return *at;
  }
};

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t)
    .count();
}

} // namespace

int main(int argc, char** argv) {
  auto seconds = bench::int_option(argc, argv, "--seconds", 3);
  auto max = bench::int_option(argc, argv, "--max", 20000);
  bench::database db;
  auto domain = "apibench_" + uuid::random().to_string().substr(0, 8);
  db::create_queue(db.conn, db::command_queue(domain));
  const std::string token = "bench_token_0123456789";
  api::api_settings s;
  s.listen = {"127.0.0.1", 0};
  s.dsn = db.dsn;
  s.tokens = api::token_store::parse(token + " " + domain, "bench");
  s.threads = threads;
  s.connections = 4;
  api::command_api server{s};
  std::printf("== command API beside command_bus::send (%d threads, %d s "
              "per side, at most %d commands per side)\n",
              threads, seconds, max);

  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (int t = 0; t < threads; ++t) {
    clients.push_back(
      std::make_unique<httplib::Client>("127.0.0.1", server.port()));
    clients.back()->set_keep_alive(true);
    // The request's head and body go out in two writes: without this,
    // Nagle holds the body until the server's delayed ACK (40 ms).
    clients.back()->set_tcp_nodelay(true);
  }
  httplib::Headers auth{{"Authorization", "Bearer " + token}};
  auto path = "/v1/domains/" + domain + "/commands";
  auto body = R"({"type": "Debit", "data": )" + payload + "}";
  std::atomic<int64_t> api_sent{0};
  std::atomic<int64_t> bus_sent{0};
  std::atomic<int64_t> failures{0};
  latencies api_lat;
  latencies bus_lat;

  bench::settle(db.conn);
  auto [api_rate, bus_rate] = bench::measure_interleaved(
    "API POST /commands", "command_bus::send", threads,
    std::chrono::milliseconds{seconds * 1000}, 6,
    [&](int t) -> int64_t {
      if (api_sent.load() >= max) {
        std::this_thread::sleep_for(1ms);
        return 0;
      }
      auto start = clock_type::now();
      auto r = clients[size_t(t)]->Post(path.c_str(), auth, body,
                                        "application/json");
      if (!r || r->status != 201) {
        ++failures;
        return 0;
      }
      api_lat.per_thread[size_t(t)].push_back(ms_since(start));
      ++api_sent;
      return 1;
    },
    [&](int t) -> int64_t {
      if (bus_sent.load() >= max) {
        std::this_thread::sleep_for(1ms);
        return 0;
      }
      send_request req;
      req.domain = domain;
      req.command_type = "Debit";
      req.command_id = uuid::random();
      req.data = json::parse(payload);
      auto start = clock_type::now();
      db.bus.send(req);
      bus_lat.per_thread[size_t(t)].push_back(ms_since(start));
      ++bus_sent;
      return 1;
    });
  bench::print(bus_rate);
  bench::print(api_rate, &bus_rate);
  std::printf("  p99 latency: API %.2f ms, command_bus::send %.2f ms (ratio "
              "%.2fx)\n",
              api_lat.p99_ms(), bus_lat.p99_ms(),
              bus_lat.p99_ms() > 0 ? api_lat.p99_ms() / bus_lat.p99_ms() : 0);
  if (failures.load() > 0)
    std::printf("  %lld API requests failed\n",
                static_cast<long long>(failures.load()));
  auto stats = server.stats();
  std::printf("  listener: %llu connections accepted, %llu refused, %llu "
              "requests rejected\n",
              static_cast<unsigned long long>(stats.listener.accepted),
              static_cast<unsigned long long>(stats.listener.refused),
              static_cast<unsigned long long>(stats.listener.rejected));
  return failures.load() > 0 ? 1 : 0;
}
