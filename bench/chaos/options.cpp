#include "bench/chaos/options.hpp"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>

#include <unistd.h>

namespace cmdbus::chaos {

namespace {

const std::vector<std::string> all_scenarios{"restart", "kill", "proxy",
                                             "stall", "nodes", "time"};

int as_int(const std::string& name, const std::string& v, int min) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty())
    throw usage_error("option " + name + " needs a number, not '" + v + "'");
  if (n < min)
    throw usage_error("option " + name + " must be at least "
                      + std::to_string(min));
  return n;
}

// The first executable `name` on PATH, else `name` itself (start fails
// with a clear line in the log then).
std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t from = 0;
  while (from <= p.size()) {
    auto to = p.find(':', from);
    if (to == std::string::npos)
      to = p.size();
    auto candidate = p.substr(from, to - from) + "/" + name;
    if (to > from && access(candidate.c_str(), X_OK) == 0)
      return candidate;
    from = to + 1;
  }
  return name;
}

} // namespace

int options::load_seconds() const {
  return seconds > 0 ? seconds : std::max(20, commands / 250);
}

options parse_options(int argc, char** argv) {
  options o;
  std::string scenario = "all";
  std::map<std::string, std::function<void(const std::string&)>> valued{
    {"--scenario", [&](auto& v) { scenario = v; }},
    {"--commands", [&](auto& v) { o.commands = as_int("--commands", v, 1); }},
    {"--processes",
     [&](auto& v) { o.processes = as_int("--processes", v, 0); }},
    {"--seconds", [&](auto& v) { o.seconds = as_int("--seconds", v, 5); }},
    {"--workers", [&](auto& v) { o.workers = as_int("--workers", v, 1); }},
    {"--restarts", [&](auto& v) { o.restarts = as_int("--restarts", v, 1); }},
    {"--kill-cycles",
     [&](auto& v) { o.kill_cycles = as_int("--kill-cycles", v, 1); }},
    {"--nodes", [&](auto& v) { o.nodes = as_int("--nodes", v, 2); }},
    {"--node-down-ms",
     [&](auto& v) { o.node_down_ms = as_int("--node-down-ms", v, 0); }},
    {"--node-worker", [&](auto& v) { o.node_worker = v; }},
    {"--cuts", [&](auto& v) { o.cuts = as_int("--cuts", v, 1); }},
    {"--cut-ms", [&](auto& v) { o.cut_ms = as_int("--cut-ms", v, 0); }},
    {"--stalls", [&](auto& v) { o.stalls = as_int("--stalls", v, 1); }},
    {"--stall-seconds",
     [&](auto& v) { o.stall_seconds = as_int("--stall-seconds", v, 1); }},
    {"--settle-seconds",
     [&](auto& v) { o.settle_seconds = as_int("--settle-seconds", v, 1); }},
    {"--give-up-seconds",
     [&](auto& v) { o.give_up_seconds = as_int("--give-up-seconds", v, 1); }},
    {"--batch-size",
     [&](auto& v) { o.batch_size = as_int("--batch-size", v, 0); }},
    {"--min-ms", [&](auto& v) { o.min_ms = as_int("--min-ms", v, 0); }},
    {"--max-ms", [&](auto& v) { o.max_ms = as_int("--max-ms", v, 0); }},
    {"--seed",
     [&](auto& v) { o.seed = static_cast<uint64_t>(as_int("--seed", v, 0)); }},
    {"--proxy-port",
     [&](auto& v) { o.proxy_port = as_int("--proxy-port", v, 1); }},
    {"--dsn", [&](auto& v) { o.dsn = v; }},
    {"--cmdbus", [&](auto& v) { o.cmdbus = v; }},
    {"--pg-script", [&](auto& v) { o.pg_script = v; }},
    {"--socat", [&](auto& v) { o.socat = v; }},
    {"--log-dir", [&](auto& v) { o.log_dir = v; }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      return o;
    }
    if (arg == "--json") {
      o.json = true;
      continue;
    }
    if (arg == "--keep-logs") {
      o.keep_logs = true;
      continue;
    }
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto it = valued.find(name);
    if (it == valued.end())
      throw usage_error("unknown argument '" + name + "'");
    if (!has_value) {
      if (i + 1 >= argc)
        throw usage_error("option " + name + " needs a value");
      value = argv[++i];
    }
    it->second(value);
  }
  if (scenario == "all")
    o.scenarios = all_scenarios;
  else if (std::find(all_scenarios.begin(), all_scenarios.end(), scenario)
           != all_scenarios.end())
    o.scenarios = {scenario};
  else
    throw usage_error("--scenario must be restart, kill, proxy, stall, nodes "
                      "or all, "
                      "not '"
                      + scenario + "'");
  if (o.max_ms < o.min_ms)
    throw usage_error("--max-ms must not be below --min-ms");
  if (o.dsn.empty()) {
    const char* env = std::getenv("CMDBUS_DSN");
    if (env == nullptr || *env == '\0')
      throw usage_error("no database: give --dsn or set CMDBUS_DSN");
    o.dsn = env;
  }
  if (o.cmdbus.empty())
    o.cmdbus = CMDBUS_BINARY;
  if (o.node_worker.empty())
    o.node_worker = CMDBUS_CHAOS_WORKER_BINARY;
  if (o.pg_script.empty())
    o.pg_script = std::string{CMDBUS_SOURCE_DIR} + "/scripts/pg";
  if (o.socat.empty())
    o.socat = find_in_path("socat");
  return o;
}

const char* help_text() {
  return R"(Usage: cmdbus-chaos [options]

Fault harness of the cmdbus worker: per scenario, in a fresh domain, sends a
mixed load (success, transient then success, permanent failure, business-rule
failure; half with reply_to, about a third in batches) over the sending time
while `cmdbus worker` processes handle it and faults hit them; then waits
until every command is final (or the settle deadline passes), stops the
workers with SIGTERM and checks that every command ended in its correct
final status, none was lost or completed twice, every reply is there, batch
counters match their commands and every batch callback was delivered.
Exit status: 0 all passed, 1 a check failed, 2 the harness could not run,
130 interrupted.

Scenarios (--scenario, default all = each in turn):
  restart   scripts/pg restart fast, 2 s later restart immediate, under the
            same worker processes (--restarts times)
  kill      kill -9 of a random worker, started again at once
            (--kill-cycles times)
  proxy     the workers (and the sender) connect through socat; it is killed
            with every connection and started again (--cuts times)
  stall     a connection holds ACCESS EXCLUSIVE on commandbus.command for
            --stall-seconds, longer than the workers' statement timeout
            (--stalls times)
  nodes     the workers (cmdbus-chaos-worker: no command handler of their
            own, visibility timeout 30 s) get every `Test` command run by
            --nodes handler nodes (`cmdbus node --demo`, --remote-pool);
            kill -9 of each node in turn, started again --node-down-ms
            later (--kill-cycles times); the table shows how long after
            each kill its commands were final (promptly: the workers make
            a lost node's commands visible again at once, not after the
            visibility timeout)
  time      every third command is delayed (sent with a not-before time 0.5
            to 8 s later); kill -9 of a random worker (--kill-cycles
            times) with one restart of PostgreSQL (fast, then immediate)
            in the middle, while delayed commands wait and fall due and
            a schedule fires every second in a domain of its own (every
            slot must fire exactly once)

Options:
  --scenario NAME        restart|kill|proxy|stall|nodes|time|all (all)
  --commands N           commands per scenario (3000)
  --processes N          DemoOrder processes per scenario, in a domain of
                         their own that the workers serve too, started over
                         the sending time (60; 0: none)
  --seconds S            sending time per scenario; faults hit between 20 %
                         and 80 % of it (max(20, commands / 250): 250
                         commands/s, which three workers keep up with)
  --workers N            worker processes (3)
  --restarts N           restart pairs of the restart scenario (1)
  --kill-cycles N        kills of the kill, nodes and time scenarios (5)
  --nodes N              handler nodes of the nodes scenario (2)
  --node-down-ms MS      how long a killed node stays down (1000)
  --node-worker PATH     the nodes scenario's worker (cmdbus-chaos-worker
                         of this build)
  --cuts N               proxy cuts (2); --cut-ms MS: time it stays down (1000)
  --stalls N             stalls (1); --stall-seconds S: each (10)
  --settle-seconds S     deadline for every command to become final after the
                         last send (30)
  --give-up-seconds S    how long a failing send is retried (60)
  --batch-size N         commands per batch (20; 0: no batches)
  --min-ms/--max-ms MS   handler duration range, so that work is in flight
                         when a fault hits (20/100)
  --seed N               seed of the plan's order (1)
  --dsn DSN              database (else CMDBUS_DSN); a migrated one
  --cmdbus PATH          the cmdbus binary (the one of this build)
  --pg-script PATH       scripts/pg (of this checkout), for the restarts; it
                         finds the cluster through CMDBUS_PG_DIR/CMDBUS_PG_PORT
  --socat PATH           socat (from PATH)
  --proxy-port N         port of the proxy (a free one)
  --log-dir DIR          where the logs go (a new folder in /tmp); kept when a
                         scenario fails or with --keep-logs
  --json                 print the figures as JSON on stdout (the tables go to
                         stderr)
  -h, --help             show this help

Every process it starts (workers, nodes, socat, the lock's connection) is
stopped on every exit path; workers, nodes and socat also die with the
harness.
)";
}

} // namespace cmdbus::chaos
