// Process managers' throughput: processes of a three-step workflow with
// no-op handlers completed per second by one worker, printed beside the
// same worker's commands per second for plain commands measured in the same
// run (three times as many no-op commands, the work a process's steps
// need). Each process step costs its command's full round (send, receive,
// handler, completion with a reply) plus a transition (the reply read,
// routed, applied in one transaction with the next command's send).
//
// It runs in a database of its own, created anew on CMDBUS_DSN's server
// (and dropped at the end), so that its first processes run as on a fresh
// database: the tables never analyzed, as after `cmdbus migrate` until
// autovacuum's first ANALYZE. The same run is then repeated in a new domain
// after a VACUUM ANALYZE; both are printed against the plain commands'
// rate, measured before and after the second run (their mean: the load of
// a shared machine drifts).
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
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/process/manager.hpp"
#include "cmdbus/sql/bundle.hpp"

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

// The phase of the processes: `processes` processes started and run to
// completion by one worker; returns the processes completed per second.
// With `analyze` the tables are analyzed once the processes are started
// (the statistics know their domain), else only checkpointed.
bench::rate run_processes(bench::database& base, const std::string& domain,
                          int processes, bool analyze,
                          const std::string& name) {
  auto registry = std::make_shared<process_registry>();
  registry->add(domain, three_steps());
  base.bus.ensure_queue(db::command_queue(domain));
  process_manager pm{base.pool, registry};
  for (int i = 0; i < processes; ++i)
    pm.start(domain, "ThreeSteps", json::object());
  if (analyze)
    bench::settle(base.conn);
  else
    base.conn.exec("CHECKPOINT");
  process_registry copy;
  copy.add(domain, three_steps());
  worker w{worker_cfg(base.dsn, domain), noop(domain), std::move(copy)};
  auto start = std::chrono::steady_clock::now();
  w.start();
  auto completed = [&] {
    return count(base.conn,
                 "SELECT count(*) FROM commandbus.process WHERE domain = $1 "
                 "AND status = 'COMPLETED'",
                 domain);
  };
  // The worker's own counter first, as for the plain commands: the count
  // above reads every process row of the domain, and polled every few
  // milliseconds it took a share of the CPU the steps run on. It is read
  // only for the last replies, applied after their commands completed.
  wait_for([&] { return w.stats().completed; },
           3 * static_cast<int64_t>(processes), start);
  auto secs = wait_for(completed, processes, start);
  w.stop(10s).get();
  auto done = completed();
  return {name, done / secs, done, secs};
}

void print_steps(const bench::rate& procs, const bench::rate& commands) {
  bench::print(procs);
  std::printf("  steps per second inside processes: %.0f /s, %.2fx of the "
              "plain commands' rate\n",
              3 * procs.per_second, 3 * procs.per_second / commands.per_second);
}

// The baseline: `n` plain no-op commands of `domain` sent, then completed by
// the same worker; returns the commands completed per second.
bench::rate run_plain(bench::database& base, const std::string& domain, int n) {
  std::vector<send_request> reqs;
  for (int i = 0; i < n; ++i) {
    send_request r;
    r.domain = domain;
    r.command_type = "Noop";
    r.command_id = uuid::random();
    reqs.push_back(std::move(r));
  }
  base.bus.send_batch(reqs);
  bench::settle(base.conn);
  worker w{worker_cfg(base.dsn, domain), noop(domain)};
  auto start = std::chrono::steady_clock::now();
  w.start();
  auto secs = wait_for([&] { return w.stats().completed; },
                       static_cast<int64_t>(n), start);
  w.stop(10s).get();
  auto done = w.stats().completed;
  return {"worker, plain no-op commands", done / secs, done, secs};
}

// Creates the database `name` anew on the server of `dsn` and migrates it;
// returns its DSN.
std::string fresh_database(const std::string& dsn, const std::string& name) {
  auto admin = db::connection::open(dsn + " dbname=postgres");
  admin.exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
  admin.exec("CREATE DATABASE " + name);
  auto out = dsn + " dbname=" + name;
  auto conn = db::connection::open(out);
  db::migrate(conn, sql::pgmq_files(), sql::commandbus_files());
  conn.take_notices();
  return out;
}

void drop_database(const std::string& dsn, const std::string& name) {
  auto admin = db::connection::open(dsn + " dbname=postgres");
  admin.exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
}

} // namespace

int main(int argc, char** argv) {
  int processes = bench::int_option(argc, argv, "--processes", 3000);
  spdlog::set_level(spdlog::level::warn);
  auto run_id = uuid::random().to_string().substr(0, 8);
  auto server = std::getenv("CMDBUS_DSN") ? std::getenv("CMDBUS_DSN") : "";
  const std::string db_name = "cmdbus_process_bench";
  setenv("CMDBUS_DSN", fresh_database(server, db_name).c_str(), 1);
  std::printf("== process manager benchmark (%d processes of 3 no-op steps, "
              "concurrency 64, prefetch 64; a fresh database)\n",
              processes);
  bench::rate commands, fresh, analyzed;
  {
    bench::database base;

    // -- processes on the fresh database (no ANALYZE yet) --------------------
    fresh = run_processes(base, "pbf_" + run_id, processes, false,
                          "processes of 3 steps, fresh database");

    // -- baseline: the same worker on 3N plain commands, before and after
    // the analyzed run (the mean of both: the machine's load drifts) -------
    auto before = run_plain(base, "pbc_" + run_id, 3 * processes);
    analyzed = run_processes(base, "pba_" + run_id, processes, true,
                             "processes of 3 steps, analyzed");
    auto after = run_plain(base, "pbd_" + run_id, 3 * processes);
    commands = {"worker, plain no-op commands (mean of 2)",
                0.5 * (before.per_second + after.per_second),
                before.items + after.items, before.seconds + after.seconds};
    std::printf("  (plain commands: %.0f /s before, %.0f /s after)\n",
                before.per_second, after.per_second);
    bench::print(commands);
    print_steps(fresh, commands);
    print_steps(analyzed, commands);
    std::printf("  fresh database vs analyzed: %.2fx\n",
                fresh.per_second / analyzed.per_second);
  }
  drop_database(server, db_name);
  bench::print_peak_rss("the benchmark with its workers");
  return 0;
}
