// Process managers' throughput: processes of a three-step workflow with
// no-op handlers completed per second by one worker, printed beside the
// same worker's commands per second for plain commands measured in the same
// run (three times as many no-op commands, the work a process's steps
// need). Each process step costs its command's full round (send, receive,
// handler, completion with a reply) plus a transition (the reply read,
// routed, applied in one transaction with the next command's send).
//
// Usage: cmdbus-process-bench [--processes N] (DSN from CMDBUS_DSN)

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "bench/bench_util.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/process/manager.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

enum class step { first, second, third };

// Three steps, each a no-op command; the state only counts the replies.
std::shared_ptr<const workflow> three_steps() {
  workflow_spec<int, step> spec;
  spec.process_type = "ThreeSteps";
  spec.steps = {
    {step::first, "First"}, {step::second, "Second"}, {step::third, "Third"}};
  spec.to_json = [](const int& n) {
    return json::parse("{\"replies\":" + std::to_string(n) + "}");
  };
  spec.from_json = [](const json& x) {
    auto& t = x.text();
    auto colon = t.find(':');
    return colon == std::string::npos ? 0 : std::atoi(t.c_str() + colon + 1);
  };
  spec.initial_state = [](const json&) { return 0; };
  spec.first_step = [](const int&) { return step::first; };
  spec.command_for = [](step, const int&) {
    return step_command{"Noop", json::object()};
  };
  spec.update_state = [](int& n, step, const reply&) { ++n; };
  spec.next_step = [](step s, const reply&, const int&) -> std::optional<step> {
    if (s == step::first)
      return step::second;
    if (s == step::second)
      return step::third;
    return std::nullopt;
  };
  return std::make_shared<workflow_definition<int, step>>(std::move(spec));
}

config::worker_config worker_cfg(const std::string& dsn,
                                 const std::string& domain) {
  config::worker_config cfg;
  cfg.dsn = dsn;
  cfg.domains = {domain};
  cfg.concurrency = 64;
  cfg.prefetch = 64;
  cfg.poll_interval = 1000ms;
  return cfg;
}

handler_registry noop(const std::string& domain) {
  handler_registry reg;
  reg.add(
    domain, "Noop",
    [](const command&, handler_context&) { return json::null(); },
    handler_mode::non_blocking);
  return reg;
}

int64_t count(db::connection& c, const std::string& sql,
              const std::string& domain) {
  return c.query(sql, domain).int64(0, 0);
}

// Waits (polling the counter `done`) until it reaches `n` or 5 minutes
// passed; returns the seconds since `start`.
template <class F>
double
wait_for(F done, int64_t n, std::chrono::steady_clock::time_point start) {
  auto deadline = start + std::chrono::minutes{5};
  while (done() < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
    .count();
}

} // namespace

int main(int argc, char** argv) {
  int processes = bench::int_option(argc, argv, "--processes", 3000);
  spdlog::set_level(spdlog::level::warn);
  auto run_id = uuid::random().to_string().substr(0, 8);
  bench::database base;
  auto& dsn = base.dsn;
  auto& pool = base.pool;
  auto& bus = base.bus;
  auto& conn = base.conn;
  std::printf("== process manager benchmark (%d processes of 3 no-op steps, "
              "concurrency 64, prefetch 64)\n",
              processes);

  // -- baseline: the same worker on 3N plain commands ------------------------
  auto plain = "pbc_" + run_id;
  {
    std::vector<send_request> reqs;
    for (int i = 0; i < 3 * processes; ++i) {
      send_request r;
      r.domain = plain;
      r.command_type = "Noop";
      r.command_id = uuid::random();
      reqs.push_back(std::move(r));
    }
    bus.send_batch(reqs);
  }
  bench::settle(conn);
  bench::rate commands;
  {
    worker w{worker_cfg(dsn, plain), noop(plain)};
    auto start = std::chrono::steady_clock::now();
    w.start();
    auto secs = wait_for([&] { return w.stats().completed; },
                         3 * static_cast<int64_t>(processes), start);
    w.stop(10s).get();
    auto done = w.stats().completed;
    commands = {"worker, plain no-op commands", done / secs, done, secs};
  }
  bench::print(commands);

  // -- processes -------------------------------------------------------------
  auto domain = "pbp_" + run_id;
  auto registry = std::make_shared<process_registry>();
  registry->add(domain, three_steps());
  bus.ensure_queue(db::command_queue(domain));
  process_manager pm{pool, registry};
  for (int i = 0; i < processes; ++i)
    pm.start(domain, "ThreeSteps", json::object());
  bench::settle(conn);
  bench::rate procs;
  {
    process_registry copy;
    copy.add(domain, three_steps());
    worker w{worker_cfg(dsn, domain), noop(domain), std::move(copy)};
    auto start = std::chrono::steady_clock::now();
    w.start();
    auto completed = [&] {
      return count(conn,
                   "SELECT count(*) FROM commandbus.process WHERE domain = $1 "
                   "AND status = 'COMPLETED'",
                   domain);
    };
    auto secs = wait_for(completed, processes, start);
    w.stop(10s).get();
    auto done = completed();
    procs = {"worker, processes of 3 steps completed", done / secs, done, secs};
  }
  bench::print(procs);
  std::printf("  steps per second inside processes: %.0f /s, %.2fx of the "
              "plain commands' rate\n",
              3 * procs.per_second, 3 * procs.per_second / commands.per_second);
  bench::print_peak_rss("the benchmark with its workers");

  for (auto& d : {plain, domain}) {
    conn.query("DELETE FROM commandbus.process_audit WHERE domain = $1", d);
    conn.query("DELETE FROM commandbus.process WHERE domain = $1", d);
    conn.query("DELETE FROM commandbus.audit WHERE domain = $1", d);
    conn.query("DELETE FROM commandbus.command WHERE domain = $1", d);
    conn.query("SELECT pgmq.drop_queue($1)", db::command_queue(d));
  }
  conn.query("SELECT pgmq.drop_queue($1)", process_reply_queue(domain));
  conn.take_notices();
  return 0;
}
