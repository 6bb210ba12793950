#pragma once

// What a chaos scenario runs and breaks: the worker processes, the TCP
// proxy between them and PostgreSQL, PostgreSQL restarts and a table lock
// that stalls the database. All of it is started from the main thread and
// stopped by the destructors, on every exit path.

#include <chrono>
#include <string>
#include <vector>

#include "bench/chaos/monitor.hpp"
#include "bench/chaos/process.hpp"
#include "tests/support/free_port.hpp"

namespace cmdbus::chaos {

/// Where the programs are.
struct tools {
  std::string cmdbus;
  std::string pg_script;
  std::string socat;
};

/// How the workers of a fleet are started.
struct worker_launch {
  /// The worker program; "" runs `cmdbus worker --demo` (the demo handlers
  /// in every domain).
  std::string program;
  /// Added to every worker's command line (e.g. --remote-pool HOST:PORT).
  std::vector<std::string> extra_args;
  /// The workers' visibility timeout.
  std::string visibility_timeout = "5s";
};

/// Worker processes of one domain, each logging to its own file.
class worker_fleet {
public:
  /// `domains`: served by every worker.
  worker_fleet(const tools& t, std::vector<std::string> domains,
               std::string dsn, std::string log_dir, int count,
               worker_launch launch = {});

  /// Starts every worker.
  void start_all();

  /// kill -9 of worker `i`, then starts it again at once.
  void kill_and_restart(size_t i);

  size_t size() const noexcept {
    return workers_.size();
  }

  /// Stops every worker with SIGTERM, waiting up to `timeout` for each to
  /// exit; kills those that do not. Returns one line per problem: a worker
  /// that had exited before (a crash, or a signal from elsewhere), one that
  /// did not stop in time, one that exited with an error.
  std::vector<std::string> stop_all(std::chrono::milliseconds timeout);

  /// The log files, one per worker.
  std::vector<std::string> log_paths() const;

  /// The ports of the workers' HTTP endpoints (kept across restarts).
  std::vector<int> http_ports() const {
    return ports_;
  }

private:
  void start(size_t i);

  tools tools_;
  std::vector<std::string> domains_;
  std::string dsn_;
  worker_launch launch_;
  std::vector<std::string> logs_;
  std::vector<int> ports_;
  std::vector<child> workers_;
};

/// `cmdbus node --demo` processes (handler nodes, without any database
/// access) serving the same domains, each on a port of its own on
/// 127.0.0.1 that it keeps across restarts, each logging to its own file.
class node_fleet {
public:
  node_fleet(const tools& t, std::vector<std::string> domains,
             std::string log_dir, int count, int concurrency);

  /// Starts every node; returns once each listens.
  void start_all();

  /// kill -9 of node `i`.
  void kill(size_t i);

  /// Starts node `i` (again); returns once it listens. Throws when it exits
  /// or does not listen within 20 s.
  void start(size_t i);

  size_t size() const noexcept {
    return nodes_.size();
  }

  /// "127.0.0.1:PORT" of every node, for the workers' --remote-pool.
  std::vector<std::string> addresses() const;

  /// As worker_fleet::stop_all.
  std::vector<std::string> stop_all(std::chrono::milliseconds timeout);

  std::vector<std::string> log_paths() const {
    return logs_;
  }

private:
  tools tools_;
  std::vector<std::string> domains_;
  int concurrency_;
  std::string log_dir_;
  std::vector<std::string> logs_;
  std::vector<int> ports_;
  std::vector<child> nodes_;
};

/// `socat` forwarding 127.0.0.1:listen_port to 127.0.0.1:target_port, one
/// forked child per connection.
class tcp_proxy {
public:
  tcp_proxy(const tools& t, int listen_port, int target_port,
            std::string log_path);

  /// Starts it and waits until it accepts connections.
  void start();

  /// Kills it with every forked child (all connections through it break).
  void cut();

  int port() const noexcept {
    return listen_port_;
  }

private:
  tools tools_;
  int listen_port_;
  int target_port_;
  std::string log_path_;
  child proc_;
};

/// A free TCP port on 127.0.0.1, below the kernel's ephemeral range (the
/// tests' helper).
using test::free_port;

/// Returns the port of `dsn` (5432 when it names none).
int port_of(const std::string& dsn);

/// Returns `dsn` (key/value or URI) as a key/value string that connects to
/// 127.0.0.1:`port` instead, every other setting kept.
std::string redirect_dsn(const std::string& dsn, int port);

/// Runs `scripts/pg restart MODE` and returns the fault: from the call to
/// the server accepting connections again. Throws when it fails.
fault_record restart_postgres(const tools& t, const std::string& mode,
                              const std::string& log_path);

/// Holds ACCESS EXCLUSIVE on commandbus.command in an open transaction of a
/// connection of its own for `hold`, then releases it. The fault runs from
/// the lock being granted to its release.
fault_record stall_database(const std::string& dsn,
                            std::chrono::milliseconds hold);

} // namespace cmdbus::chaos
