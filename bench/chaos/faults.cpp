#include "bench/chaos/faults.hpp"

#include <csignal>
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

} // namespace

// -- workers
// -------------------------------------------------------------------

worker_fleet::worker_fleet(const tools& t, std::vector<std::string> domains,
                           std::string dsn, std::string log_dir, int count)
  : tools_(t), domains_(std::move(domains)), dsn_(std::move(dsn)) {
  for (int i = 0; i < count; ++i) {
    logs_.push_back(log_dir + "/worker-" + std::to_string(i + 1) + ".log");
    ports_.push_back(free_port());
  }
  workers_.resize(static_cast<size_t>(count));
}

void worker_fleet::start(size_t i) {
  process_spec spec;
  spec.argv = {tools_.cmdbus,
               "worker",
               "--demo",
               "--concurrency",
               "16",
               "--visibility-timeout",
               "5s",
               "--statement-timeout",
               "4s",
               "--backoff",
               "1",
               "--shutdown-timeout",
               "5s",
               "--http",
               "127.0.0.1:" + std::to_string(ports_[i])};
  for (auto& d : domains_) {
    spec.argv.push_back("--domain");
    spec.argv.push_back(d);
  }
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
  std::vector<std::string> problems;
  std::vector<bool> signalled(workers_.size(), false);
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto name = "worker " + std::to_string(i + 1);
    if (!workers_[i].running()) {
      problems.push_back(
        name + " had exited before the harness stopped it (exit code "
        + std::to_string(workers_[i].exit_code().value_or(-1)) + ")");
      continue;
    }
    log_line(logs_[i], "SIGTERM");
    workers_[i].signal(SIGTERM);
    signalled[i] = true;
  }
  auto deadline = clock::now() + timeout;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!signalled[i])
      continue;
    auto name = "worker " + std::to_string(i + 1);
    auto left = std::max(clock::duration::zero(), deadline - clock::now());
    auto code = workers_[i].wait_for(
      std::chrono::duration_cast<std::chrono::milliseconds>(left));
    if (!code) {
      workers_[i].kill_now();
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

std::vector<std::string> worker_fleet::log_paths() const {
  return logs_;
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

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw std::runtime_error("chaos: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0
      || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error("chaos: no free port");
  }
  close(fd);
  return ntohs(addr.sin_port);
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
