#include "bench/chaos/scenario.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>

#include "bench/chaos/faults.hpp"
#include "bench/chaos/health_watch.hpp"
#include "bench/chaos/load.hpp"
#include "bench/chaos/monitor.hpp"
#include "bench/chaos/processes.hpp"
#include "bench/chaos/sender.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/schedules.hpp"
#include "cmdbus/process/registry.hpp"

namespace cmdbus::chaos {

using namespace std::chrono_literals;

namespace {

double since(clock::time_point from) {
  return std::chrono::duration<double>(clock::now() - from).count();
}

db::connection open_checked(const std::string& dsn) {
  db::connection_options opts;
  opts.application_name = "cmdbus-chaos";
  opts.statement_timeout = 30000ms;
  opts.connect_timeout = std::chrono::seconds{5};
  return db::connection::open(dsn, opts);
}

// Creates the domain's queues before the workers start reading them.
void create_queues(const std::string& dsn, const load_plan& plan) {
  db::pool_options popts;
  popts.dsn = dsn;
  popts.max_size = 1;
  db::pool pool{popts};
  command_bus bus{pool};
  bus.ensure_queue(db::command_queue(plan.domain));
  bus.ensure_queue(plan.reply_queue);
}

// The time scenario's schedule: a `Test` command every second.
constexpr const char* schedule_name = "chaos-every-second";

void add_schedule(const std::string& dsn, const std::string& domain) {
  load_plan queues;
  queues.domain = domain;
  queues.reply_queue = domain + "__replies";
  create_queues(dsn, queues);
  schedules::definition d;
  d.domain = domain;
  d.name = schedule_name;
  d.command_type = "Test";
  d.data = json::parse(R"({"behavior": {"outcome": "success"}})");
  d.every = std::chrono::milliseconds{1000};
  auto conn = open_checked(dsn);
  schedules::add(conn, d);
}

// Pauses the schedule once the load is sent, so that its domain settles;
// retried while the database is briefly away.
void pause_schedule(const std::string& dsn, const std::string& domain) {
  for (int attempt = 0;; ++attempt) {
    try {
      auto conn = open_checked(dsn);
      schedules::pause(conn, domain, schedule_name);
      return;
    } catch (const db::error&) {
      if (attempt >= 20)
        throw;
      pause_for(500ms);
    }
  }
}

// What the faults act on.
struct targets {
  const options& o;
  tools t;
  worker_fleet& fleet;
  tcp_proxy* proxy;
  std::string dir;
  // The nodes scenario's handler nodes, the domains they serve, and where
  // its kills are recorded.
  node_fleet* nodes;
  std::vector<std::string> domains;
  std::vector<node_kill>* kills;
};

// Runs `count` faults spread evenly between 20 % and 80 % of the sending
// time that started at `load_start`.
std::vector<fault_record> inject(const std::string& name, targets& x,
                                 clock::time_point load_start) {
  std::vector<fault_record> faults;
  auto span = std::chrono::duration_cast<clock::duration>(
    std::chrono::seconds{x.o.load_seconds()} * 0.6);
  auto first = load_start
               + std::chrono::duration_cast<clock::duration>(
                 std::chrono::seconds{x.o.load_seconds()} * 0.2);
  auto spread = [&](int count, const std::function<void(int)>& fault) {
    for (int k = 0; k < count; ++k) {
      pause_until(first + span * k / count);
      fault(k);
    }
  };
  auto pg_log = x.dir + "/pg.log";
  // kill -9 of a random worker (seeded), started again at once.
  std::mt19937_64 rng{x.o.seed};
  std::uniform_int_distribution<size_t> pick{0, x.fleet.size() - 1};
  auto kill_random_worker = [&] {
    auto i = pick(rng);
    fault_record f;
    f.what = "kill -9 worker " + std::to_string(i + 1);
    f.start = clock::now();
    x.fleet.kill_and_restart(i);
    f.end = clock::now();
    faults.push_back(f);
  };
  if (name == "restart") {
    spread(x.o.restarts, [&](int) {
      faults.push_back(restart_postgres(x.t, "fast", pg_log));
      pause_for(2000ms);
      faults.push_back(restart_postgres(x.t, "immediate", pg_log));
    });
  } else if (name == "kill") {
    spread(x.o.kill_cycles, [&](int) { kill_random_worker(); });
  } else if (name == "proxy") {
    spread(x.o.cuts, [&](int) {
      fault_record f;
      f.what = "proxy cut";
      f.start = clock::now();
      x.proxy->cut();
      pause_for(std::chrono::milliseconds{x.o.cut_ms});
      x.proxy->start();
      f.end = clock::now();
      faults.push_back(f);
    });
  } else if (name == "nodes") {
    // Each node in turn; the commands in flight are taken just before the
    // kill, with the database's clock, to see later when they were final.
    auto conn = open_checked(x.o.dsn);
    spread(x.o.kill_cycles, [&](int k) {
      auto i = static_cast<size_t>(k) % x.nodes->size();
      auto kill = in_flight_now(conn, x.domains);
      kill.fault = faults.size();
      fault_record f;
      f.what = "kill -9 node " + std::to_string(i + 1);
      f.start = clock::now();
      x.nodes->kill(i);
      pause_for(std::chrono::milliseconds{x.o.node_down_ms});
      x.nodes->start(i);
      f.end = clock::now();
      faults.push_back(f);
      x.kills->push_back(kill);
    });
  } else if (name == "time") {
    // Kills of random workers, and one restart of PostgreSQL (fast, then
    // immediate) in the middle, while delayed commands wait and fall due.
    spread(x.o.kill_cycles, [&](int k) {
      if (k == x.o.kill_cycles / 2) {
        faults.push_back(restart_postgres(x.t, "fast", pg_log));
        pause_for(2000ms);
        faults.push_back(restart_postgres(x.t, "immediate", pg_log));
      }
      kill_random_worker();
    });
  } else if (name == "stall") {
    spread(x.o.stalls, [&](int) {
      faults.push_back(
        stall_database(x.o.dsn, std::chrono::seconds{x.o.stall_seconds}));
    });
  }
  return faults;
}

// Polls until every command is final, every final batch's callback is
// delivered and every process of `process_domain` (if any) is final, or the
// deadline passes; returns whether it settled.
bool wait_until_settled(const std::string& dsn, const std::string& domain,
                        const std::string& process_domain,
                        clock::time_point deadline) {
  std::optional<db::connection> conn;
  for (;;) {
    try {
      if (!conn)
        conn.emplace(open_checked(dsn));
      auto left = unsettled(*conn, domain);
      if (!process_domain.empty())
        left += unsettled(*conn, process_domain)
                + unsettled_processes(*conn, process_domain);
      if (left == 0)
        return true;
    } catch (const db::error&) {
      conn.reset();
    }
    if (clock::now() >= deadline)
      return false;
    pause_for(250ms);
  }
}

// Fills in the health figures: a restart of PostgreSQL must show on some
// worker's /healthz while it lasts (or shortly after: the workers notice at
// their next round trip), and every worker must say HEALTHY once the load
// settled (their sessions work again), within 30 s.
void watch_health(scenario_report& r, const health_watch& health,
                  const std::string& name) {
  r.health_must_degrade = name == "restart" && !r.faults.empty();
  if (r.health_must_degrade)
    r.health_degraded = health.unwell_between(
      r.faults.front().start, r.faults.back().end + std::chrono::seconds{10});
  r.health_recovered = health.wait_all_healthy(clock::now()
                                               + std::chrono::seconds{30});
  r.health_final = health.latest();
  for (size_t i = 0; i < r.health_final.size(); ++i) {
    std::string line = "worker " + std::to_string(i + 1) + ":";
    for (auto& c : health.changes(i)) {
      char at[32];
      std::snprintf(at, sizeof at, " at %.1f s;",
                    std::chrono::duration<double>(c.at - r.started).count());
      line += " " + c.state + at;
    }
    r.health_history.push_back(line);
  }
}

} // namespace

scenario_report run_scenario(const std::string& name, const options& o,
                             const std::string& log_dir) {
  scenario_report r;
  r.scenario = name;
  r.workers = o.workers;
  r.planned_send_seconds = o.load_seconds();
  r.started = clock::now();
  r.domain = "chaos_" + name + "_" + uuid::random().to_string().substr(0, 8);
  auto dir = log_dir + "/" + name;
  std::filesystem::create_directories(dir);

  load_settings ls;
  ls.commands = o.commands;
  ls.batch_size = o.batch_size;
  ls.min_duration_ms = o.min_ms;
  ls.max_duration_ms = o.max_ms;
  ls.seed = o.seed;
  if (name == "time")
    ls.delayed_every = 3;
  auto plan = std::make_shared<load_plan>(make_plan(r.domain, ls));
  create_queues(o.dsn, *plan);

  tools t{o.cmdbus, o.pg_script, o.socat};
  // Declared in start order: destroyed (stopped) the other way round.
  std::unique_ptr<tcp_proxy> proxy;
  auto worker_dsn = o.dsn;
  if (name == "proxy") {
    auto port = o.proxy_port > 0 ? o.proxy_port : free_port();
    proxy = std::make_unique<tcp_proxy>(t, port, port_of(o.dsn),
                                        dir + "/socat.log");
    proxy->start();
    r.logs.push_back(dir + "/socat.log");
    worker_dsn = redirect_dsn(o.dsn, port);
  }
  // The processes live in a domain of their own, served by the same
  // workers.
  process_plan pplan;
  std::vector<std::string> domains{r.domain};
  if (o.processes > 0) {
    pplan = {r.domain + "_p", o.processes, r.domain};
    r.process_domain = pplan.domain;
    domains.push_back(pplan.domain);
    load_plan queues;
    queues.domain = pplan.domain;
    queues.reply_queue = process_reply_queue(pplan.domain);
    create_queues(o.dsn, queues);
  }
  // The time scenario: a schedule firing every second in a domain of its
  // own, served by the same workers, through the kills and the restart.
  if (name == "time") {
    r.schedule_domain = r.domain + "_s";
    domains.push_back(r.schedule_domain);
    add_schedule(o.dsn, r.schedule_domain);
  }
  // The nodes scenario: every `Test` command runs on handler nodes, which
  // the workers (without handlers of their own) reach through their remote
  // pools. A long visibility timeout, so that "promptly" shows: a lost
  // node's commands are final long before it.
  std::unique_ptr<node_fleet> nodes;
  worker_launch launch;
  if (name == "nodes") {
    nodes = std::make_unique<node_fleet>(t, domains, dir, o.nodes, 16);
    for (auto& l : nodes->log_paths())
      r.logs.push_back(l);
    nodes->start_all();
    launch.program = o.node_worker;
    launch.visibility_timeout = "30s";
    for (auto& a : nodes->addresses())
      launch.extra_args.insert(launch.extra_args.end(), {"--remote-pool", a});
    launch.extra_args.insert(launch.extra_args.end(),
                             {"--remote-reconnect-max", "1s"});
    r.visibility_timeout_seconds = 30;
  }
  worker_fleet fleet{t, domains, worker_dsn, dir, o.workers, launch};
  for (auto& l : fleet.log_paths())
    r.logs.push_back(l);
  if (name == "restart" || name == "time")
    r.logs.push_back(dir + "/pg.log");
  fleet.start_all();
  progress_monitor monitor{o.dsn, r.domain};
  monitor.start();
  health_watch health{fleet.http_ports()};
  health.start();
  // The sender is a client like the workers: through the proxy too.
  sender snd{plan, worker_dsn, std::chrono::seconds{o.load_seconds()},
             std::chrono::seconds{o.give_up_seconds}};
  process_starter starter{pplan, worker_dsn,
                          std::chrono::seconds{o.load_seconds()},
                          std::chrono::seconds{o.give_up_seconds}};
  auto load_start = clock::now();
  snd.start();
  starter.start();

  targets x{o, t, fleet, proxy.get(), dir, nodes.get(), domains,
            &r.node_kills};
  r.faults = inject(name, x, load_start);
  // One send attempt takes at most a connect timeout, or as long as the
  // database stalls, unless the client hangs; threads stuck in one attempt
  // are abandoned.
  auto hung_after = std::chrono::seconds{std::max(30, o.stall_seconds + 20)};
  while (!snd.done_or_hung(hung_after))
    pause_for(50ms);
  snd.finish_within(0ms);
  starter.finish();
  r.processes_started = starter.started();
  r.processes_unstarted = starter.given_up();
  r.sending = snd.stats();
  auto sent_end = clock::now();
  r.send_seconds = since(load_start);
  if (!r.schedule_domain.empty())
    pause_schedule(o.dsn, r.schedule_domain);
  auto settle_deadline = sent_end + std::chrono::seconds{o.settle_seconds};
  r.settled = wait_until_settled(o.dsn, r.domain, r.process_domain,
                                 settle_deadline);
  if (!r.schedule_domain.empty())
    r.settled = wait_until_settled(o.dsn, r.schedule_domain, "",
                                   settle_deadline)
                && r.settled;
  r.settle_seconds = since(sent_end);
  watch_health(r, health, name);
  // The shutdown timeout given to the workers is 5 s; 15 s is ample.
  r.worker_problems = fleet.stop_all(15000ms);
  if (nodes)
    for (auto& p : nodes->stop_all(15000ms))
      r.worker_problems.push_back(p);
  monitor.stop();
  compute_recovery(r.faults, monitor.samples());
  proxy.reset();

  auto conn = open_checked(o.dsn);
  check_outcome(conn, *plan, r);
  if (o.processes > 0)
    check_processes(conn, pplan, r);
  if (nodes)
    check_node_kills(conn, domains, fleet.log_paths(), r);
  if (!r.schedule_domain.empty())
    check_schedule(conn, r);
  r.seconds = since(r.started);
  return r;
}

} // namespace cmdbus::chaos
