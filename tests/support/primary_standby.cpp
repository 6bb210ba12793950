#include "tests/support/primary_standby.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <unistd.h>

#include "cmdbus/db/connection.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/server_programs.hpp"

namespace cmdbus::test {

namespace {

namespace fs = std::filesystem;

constexpr const char* who = "primary_standby";

/// The settings both servers share (the standby's copy of the primary's
/// file gets its own port and socket folder appended).
std::string server_conf(int port, const fs::path& sockets) {
  return "\n# --- tests/support/primary_standby ---\n"
         "listen_addresses = '127.0.0.1'\n"
         "port = "
         + std::to_string(port)
         + "\n"
           "unix_socket_directories = '"
         + sockets.string()
         + "'\n"
           "max_connections = 100\n"
           "shared_buffers = 64MB\n"
           "wal_level = replica\n"
           "max_wal_senders = 4\n"
           "hot_standby = on\n"
           // Servers die with kill -9 here, never their host: without
           // fsync nothing acknowledged is lost to a process's death.
           "fsync = off\n"
           "logging_collector = off\n";
}

/// The parent pid of `pid` from /proc (0 when unknown).
pid_t parent_of(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat;
  std::getline(in, stat);
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
  auto close = stat.rfind(')');
  if (close == std::string::npos)
    return 0;
  std::istringstream rest{stat.substr(close + 1)};
  char state = 0;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

/// Whether `pid` is gone or a zombie (dead, not reaped yet).
bool dead(pid_t pid) {
  auto state = process_state(pid);
  return state == 0 || state == 'Z' || state == 'X';
}

/// The processes whose parent is `pid`.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  for (auto& entry : fs::directory_iterator{"/proc"}) {
    auto name = entry.path().filename().string();
    if (name.empty()
        || name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    auto child = static_cast<pid_t>(std::stol(name));
    if (parent_of(child) == pid)
      out.push_back(child);
  }
  return out;
}

int distinct_free_port(int other) {
  for (;;) {
    auto port = free_port();
    if (port != other)
      return port;
  }
}

} // namespace

primary_standby::primary_standby(std::string dbname, replication mode)
  : dbname_(std::move(dbname)) {
  dir_ = make_server_folder("cmdbus-failover");
  try {
    fs::path dir{dir_};
    for (auto* sub : {"run-primary", "run-standby"}) {
      fs::create_directory(dir / sub);
      give_to_server(dir / sub, who);
    }
    primary_port_ = free_port();
    standby_port_ = distinct_free_port(primary_port_);

    run("initdb",
        {"-D", (dir / "primary").string(), "-U", "cmdbus", "--auth=trust", "-E",
         "UTF8", "--locale=C.UTF-8", "--no-sync"});
    append_to(dir / "primary" / "postgresql.conf",
              server_conf(primary_port_, dir / "run-primary"), who);
    run("pg_ctl", {"-D", (dir / "primary").string(), "-l",
                   (dir / "primary.log").string(), "-w", "-t", "60", "start"});
    primary_alive_ = true;
    run("createdb", {"-h", "127.0.0.1", "-p", std::to_string(primary_port_),
                     "-U", "cmdbus", dbname_});

    // The standby streams through the proxy: -R writes primary_conninfo
    // with the address the backup was taken from.
    replication_ = std::make_unique<tcp_proxy>(primary_port_);
    run("pg_basebackup",
        {"-D", (dir / "standby").string(), "-h", "127.0.0.1", "-p",
         std::to_string(replication_->port()), "-U", "cmdbus", "-R", "-X",
         "stream", "-c", "fast", "--no-sync"});
    append_to(dir / "standby" / "postgresql.conf",
              server_conf(standby_port_, dir / "run-standby"), who);
    run("pg_ctl", {"-D", (dir / "standby").string(), "-l",
                   (dir / "standby.log").string(), "-w", "-t", "60", "start"});
    standby_alive_ = true;

    auto primary = db::connection::open(primary_dsn());
    auto streaming = [&] {
      return primary
               .exec("SELECT count(*) FROM pg_stat_replication "
                     "WHERE state = 'streaming'")
               .int64(0, 0)
             > 0;
    };
    if (!eventually(streaming, std::chrono::seconds{30}))
      throw std::runtime_error("primary_standby: the standby does not stream");
    if (mode == replication::synchronous) {
      // In postgresql.auto.conf of the primary only (the base backup was
      // taken before): once promoted, the standby waits for nobody.
      primary.exec("ALTER SYSTEM SET synchronous_standby_names = '*'");
      primary.exec("ALTER SYSTEM SET synchronous_commit = 'on'");
      primary.exec("SELECT pg_reload_conf()");
      auto synchronous = [&] {
        return primary
                 .exec("SELECT count(*) FROM pg_stat_replication "
                       "WHERE sync_state = 'sync'")
                 .int64(0, 0)
               > 0;
      };
      if (!eventually(synchronous, std::chrono::seconds{30}))
        throw std::runtime_error(
          "primary_standby: the standby did not become synchronous");
    }
  } catch (const std::exception& e) {
    auto what = std::string{e.what()} + "\n" + logs();
    shut_down();
    throw std::runtime_error(what);
  }
}

primary_standby::~primary_standby() {
  shut_down();
}

void primary_standby::shut_down() noexcept {
  fs::path dir{dir_};
  for (auto [alive, sub] : {std::pair{&primary_alive_, "primary"},
                            std::pair{&standby_alive_, "standby"}}) {
    if (!*alive)
      continue;
    *alive = false;
    try {
      run("pg_ctl",
          {"-D", (dir / sub).string(), "-m", "immediate", "-w", "stop"});
    } catch (const std::exception&) {
      // Already gone: nothing to stop.
    }
  }
  replication_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    dir_.clear();
  }
}

std::string primary_standby::dsn(int port) const {
  return "host=127.0.0.1 port=" + std::to_string(port) + " dbname=" + dbname_
         + " user=cmdbus";
}

std::string primary_standby::primary_dsn() const {
  return dsn(primary_port_);
}

std::string primary_standby::standby_dsn() const {
  return dsn(standby_port_);
}

std::string primary_standby::failover_dsn() const {
  return "host=127.0.0.1,127.0.0.1 port=" + std::to_string(primary_port_) + ","
         + std::to_string(standby_port_) + " dbname=" + dbname_
         + " user=cmdbus target_session_attrs=read-write connect_timeout=2";
}

void primary_standby::wait_caught_up(std::chrono::milliseconds deadline) {
  auto primary = db::connection::open(primary_dsn());
  auto lsn = primary.exec("SELECT pg_current_wal_lsn()::text")
               .opt_text(0, 0)
               .value_or("");
  auto standby = db::connection::open(standby_dsn());
  auto replayed = [&] {
    return standby.query("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn)
      .boolean(0, 0);
  };
  if (!eventually(replayed, deadline))
    throw std::runtime_error("primary_standby: the standby did not replay "
                             "up to "
                             + lsn + "\n" + logs());
}

void primary_standby::freeze_replication() {
  replication_->freeze();
}

void primary_standby::kill_primary() {
  fs::path pid_file = fs::path{dir_} / "primary" / "postmaster.pid";
  std::ifstream in{pid_file};
  pid_t postmaster = 0;
  if (!(in >> postmaster) || postmaster <= 0)
    throw std::runtime_error("primary_standby: no postmaster.pid");
  // Stopped first, the postmaster cannot react to its children's deaths
  // (a crash restart) before it dies itself.
  ::kill(postmaster, SIGSTOP);
  auto children = children_of(postmaster);
  for (auto pid : children)
    ::kill(pid, SIGKILL);
  ::kill(postmaster, SIGKILL);
  primary_alive_ = false;
  children.push_back(postmaster);
  auto all_dead = [&] {
    for (auto pid : children)
      if (!dead(pid))
        return false;
    return true;
  };
  if (!eventually(all_dead, std::chrono::seconds{10}))
    throw std::runtime_error("primary_standby: the primary did not die");
}

void primary_standby::promote_standby() {
  run("pg_ctl", {"-D", (fs::path{dir_} / "standby").string(), "-w", "-t", "60",
                 "promote"});
  auto standby = db::connection::open(standby_dsn());
  auto writable = [&] {
    return !standby.exec("SELECT pg_is_in_recovery()").boolean(0, 0);
  };
  if (!eventually(writable, std::chrono::seconds{30}))
    throw std::runtime_error("primary_standby: the standby was not promoted\n"
                             + logs());
}

std::string primary_standby::logs() const {
  fs::path dir{dir_};
  return "--- primary log (tail) ---\n" + tail_of(dir / "primary.log", 30)
         + "--- standby log (tail) ---\n" + tail_of(dir / "standby.log", 30);
}

void primary_standby::run(const std::string& program,
                          const std::vector<std::string>& args) {
  run_server_program(dir_, program, args, who);
}

} // namespace cmdbus::test
