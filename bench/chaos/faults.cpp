#include "bench/chaos/faults.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::chaos {

using namespace std::chrono_literals;

namespace {

void log_line(const std::string& path, const std::string& line) {
  std::ofstream out{path, std::ios::app};
  out << "---- chaos: " << line << std::endl;
}

// Whether something accepts TCP connections on 127.0.0.1:port.
bool accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// The DSN's settings as libpq reads them (key/value or URI); empty values
// are left out. Throws without echoing the DSN.
std::vector<std::pair<std::string, std::string>>
parse_dsn(const std::string& dsn) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(dsn.c_str(), &err);
  if (opts == nullptr) {
    if (err != nullptr)
      PQfreemem(err);
    throw std::runtime_error("chaos: the DSN cannot be parsed");
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (auto* o = opts; o->keyword != nullptr; ++o)
    if (o->val != nullptr && *o->val != '\0')
      out.emplace_back(o->keyword, o->val);
  PQconninfoFree(opts);
  return out;
}

std::string quoted(const std::string& v) {
  std::string out = "'";
  for (char ch : v) {
    if (ch == '\'' || ch == '\\')
      out += '\\';
    out += ch;
  }
  return out + "'";
}

// Stops `procs` (named KIND N) with SIGTERM, waiting up to `timeout` for
// each to exit; kills those that do not. One line per problem.
std::vector<std::string> stop_children(const std::string& kind,
                                       std::vector<child>& procs,
                                       const std::vector<std::string>& logs,
                                       std::chrono::milliseconds timeout) {
  std::vector<std::string> problems;
  std::vector<bool> signalled(procs.size(), false);
  for (size_t i = 0; i < procs.size(); ++i) {
    auto name = kind + " " + std::to_string(i + 1);
    if (!procs[i].running()) {
      problems.push_back(
        name + " had exited before the harness stopped it (exit code "
        + std::to_string(procs[i].exit_code().value_or(-1)) + ")");
      continue;
    }
    log_line(logs[i], "SIGTERM");
    procs[i].signal(SIGTERM);
    signalled[i] = true;
  }
  auto deadline = clock::now() + timeout;
  for (size_t i = 0; i < procs.size(); ++i) {
    if (!signalled[i])
      continue;
    auto name = kind + " " + std::to_string(i + 1);
    auto left = std::max(clock::duration::zero(), deadline - clock::now());
    auto code = procs[i].wait_for(
      std::chrono::duration_cast<std::chrono::milliseconds>(left));
    if (!code) {
      procs[i].kill_now();
      problems.push_back(name + " did not exit within "
                         + std::to_string(timeout.count() / 1000)
                         + " s of SIGTERM (killed)");
    } else if (*code != 0) {
      problems.push_back(name + " exited with code " + std::to_string(*code)
                         + " after SIGTERM");
    }
  }
  return problems;
}

} // namespace

// -- workers
// -------------------------------------------------------------------

worker_fleet::worker_fleet(const tools& t, std::vector<std::string> domains,
                           std::string dsn, std::string log_dir, int count,
                           worker_launch launch)
  : tools_(t), domains_(std::move(domains)), dsn_(std::move(dsn)),
    launch_(std::move(launch)) {
  for (int i = 0; i < count; ++i) {
    logs_.push_back(log_dir + "/worker-" + std::to_string(i + 1) + ".log");
    ports_.push_back(free_port());
  }
  workers_.resize(static_cast<size_t>(count));
}

void worker_fleet::start(size_t i) {
  process_spec spec;
  if (launch_.program.empty())
    spec.argv = {tools_.cmdbus, "worker", "--demo"};
  else
    spec.argv = {launch_.program};
  spec.argv.insert(spec.argv.end(),
                   {"--concurrency",
               "16",
               "--visibility-timeout",
               launch_.visibility_timeout,
               "--statement-timeout",
               "4s",
               "--backoff",
               "1",
               "--shutdown-timeout",
               "5s",
               "--http",
               "127.0.0.1:" + std::to_string(ports_[i])});
  for (auto& d : domains_) {
    spec.argv.push_back("--domain");
    spec.argv.push_back(d);
  }
  spec.argv.insert(spec.argv.end(), launch_.extra_args.begin(),
                   launch_.extra_args.end());
  // In the environment, not on the command line: the DSN holds a password.
  spec.env = {"CMDBUS_DSN=" + dsn_};
  spec.log_path = logs_[i];
  workers_[i] = child::start(spec);
}

void worker_fleet::start_all() {
  for (size_t i = 0; i < workers_.size(); ++i)
    start(i);
}

void worker_fleet::kill_and_restart(size_t i) {
  workers_[i].kill_now();
  log_line(logs_[i], "kill -9, starting again");
  start(i);
}

std::vector<std::string>
worker_fleet::stop_all(std::chrono::milliseconds timeout) {
  return stop_children("worker", workers_, logs_, timeout);
}

std::vector<std::string> worker_fleet::log_paths() const {
  return logs_;
}

// -- handler nodes
// -------------------------------------------------------------

node_fleet::node_fleet(const tools& t, std::vector<std::string> domains,
                       std::string log_dir, int count, int concurrency)
  : tools_(t), domains_(std::move(domains)), concurrency_(concurrency),
    log_dir_(std::move(log_dir)) {
  for (int i = 0; i < count; ++i) {
    logs_.push_back(log_dir_ + "/node-" + std::to_string(i + 1) + ".log");
    ports_.push_back(free_port());
  }
  nodes_.resize(static_cast<size_t>(count));
}

void node_fleet::start(size_t i) {
  auto name = "node-" + std::to_string(i + 1);
  auto port_file = log_dir_ + "/" + name + ".port";
  std::remove(port_file.c_str());
  process_spec spec;
  spec.argv = {tools_.cmdbus,   "node",
               "--demo",        "--concurrency",
               std::to_string(concurrency_), "--listen",
               "127.0.0.1:" + std::to_string(ports_[i]),
               "--port-file",   port_file,
               "--name",        name,
               "--shutdown-timeout", "5s"};
  for (auto& d : domains_) {
    spec.argv.push_back("--domain");
    spec.argv.push_back(d);
  }
  // No database settings at all: a node never needs them.
  spec.env = {"PGHOST=/nonexistent", "PGDATABASE=none"};
  spec.log_path = logs_[i];
  nodes_[i] = child::start(spec);
  auto deadline = clock::now() + 20s;
  for (;;) {
    std::ifstream in{port_file};
    int port = 0;
    if (in >> port && port == ports_[i])
      return;
    if (!nodes_[i].running())
      throw std::runtime_error("chaos: " + name + " exited with code "
                               + std::to_string(*nodes_[i].exit_code())
                               + ":\n" + tail_of(logs_[i], 5));
    if (clock::now() >= deadline)
      throw std::runtime_error("chaos: " + name + " does not listen on port "
                               + std::to_string(ports_[i]));
    pause_for(20ms);
  }
}

void node_fleet::start_all() {
  for (size_t i = 0; i < nodes_.size(); ++i)
    start(i);
}

void node_fleet::kill(size_t i) {
  nodes_[i].kill_now();
  log_line(logs_[i], "kill -9");
}

std::vector<std::string> node_fleet::addresses() const {
  std::vector<std::string> out;
  for (auto p : ports_)
    out.push_back("127.0.0.1:" + std::to_string(p));
  return out;
}

std::vector<std::string>
node_fleet::stop_all(std::chrono::milliseconds timeout) {
  return stop_children("node", nodes_, logs_, timeout);
}

// -- proxy
// ---------------------------------------------------------------------

tcp_proxy::tcp_proxy(const tools& t, int listen_port, int target_port,
                     std::string log_path)
  : tools_(t), listen_port_(listen_port), target_port_(target_port),
    log_path_(std::move(log_path)) {
  // nop
}

void tcp_proxy::start() {
  process_spec spec;
  spec.argv = {tools_.socat,
               "TCP-LISTEN:" + std::to_string(listen_port_)
                 + ",fork,reuseaddr,bind=127.0.0.1",
               "TCP:127.0.0.1:" + std::to_string(target_port_)};
  spec.log_path = log_path_;
  proc_ = child::start(spec);
  auto deadline = clock::now() + 10s;
  while (!accepts(listen_port_)) {
    if (!proc_.running())
      throw std::runtime_error("chaos: socat exited with code "
                               + std::to_string(*proc_.exit_code()) + ":\n"
                               + tail_of(log_path_, 5));
    if (clock::now() >= deadline)
      throw std::runtime_error("chaos: socat does not accept connections on "
                               "port "
                               + std::to_string(listen_port_));
    pause_for(20ms);
  }
}

void tcp_proxy::cut() {
  proc_.kill_now();
  log_line(log_path_, "proxy killed with all its connections");
}

int port_of(const std::string& dsn) {
  for (auto& [k, v] : parse_dsn(dsn))
    if (k == "port")
      return std::stoi(v);
  return 5432;
}

std::string redirect_dsn(const std::string& dsn, int port) {
  std::string out = "host=127.0.0.1 port=" + std::to_string(port);
  for (auto& [k, v] : parse_dsn(dsn))
    if (k != "host" && k != "hostaddr" && k != "port")
      out += " " + k + "=" + quoted(v);
  return out;
}

// -- PostgreSQL
// ----------------------------------------------------------------

fault_record restart_postgres(const tools& t, const std::string& mode,
                              const std::string& log_path) {
  process_spec spec;
  spec.argv = {t.pg_script, "restart", mode};
  // scripts/pg finds the cluster through CMDBUS_PG_DIR / CMDBUS_PG_PORT.
  spec.keep_cmdbus_env = true;
  // It prints the DSN (with its password) on stdout: not into the log.
  spec.log_path = log_path;
  spec.discard_stdout = true;
  spec.die_with_parent = false;
  log_line(log_path, "scripts/pg restart " + mode);
  fault_record f;
  f.what = "pg restart " + mode;
  f.start = clock::now();
  auto code = run_to_end(spec, 120s);
  f.end = clock::now();
  if (code != 0)
    throw std::runtime_error("chaos: scripts/pg restart " + mode
                             + " failed (exit code " + std::to_string(code)
                             + "):\n" + tail_of(log_path, 10));
  return f;
}

fault_record stall_database(const std::string& dsn,
                            std::chrono::milliseconds hold) {
  db::connection_options opts;
  opts.application_name = "cmdbus-chaos-lock";
  auto conn = db::connection::open(dsn, opts);
  fault_record f;
  f.what = "stall " + std::to_string(hold.count() / 1000) + " s";
  db::transaction tx{conn};
  conn.exec("SET LOCAL lock_timeout = '30s'");
  conn.exec("LOCK TABLE commandbus.command IN ACCESS EXCLUSIVE MODE");
  f.start = clock::now();
  pause_for(hold);
  // Ends the transaction, which releases the lock.
  tx.commit();
  f.end = clock::now();
  return f;
}

} // namespace cmdbus::chaos
