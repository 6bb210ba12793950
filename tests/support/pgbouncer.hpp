#pragma once

// A private PgBouncer (Debian `pgbouncer`) in front of the test server, in
// session or transaction pooling mode: its own port on 127.0.0.1, its own
// unix socket folder, its pgbouncer.ini and userlist in a temporary folder,
// the test DSN's user and password for the clients and for its logins to
// the server. As root it drops to the `postgres` system user (it refuses to
// run as root). Stopped (kill -9) at the end of the scope.

#include <chrono>
#include <optional>
#include <string>

#include <sys/types.h>

#include "tests/support/temp_dir.hpp"

namespace cmdbus::test {

enum class pool_mode { session, transaction };

struct pgbouncer_options {
  pool_mode mode = pool_mode::session;
  /// Server connections per database and user (default_pool_size).
  int pool_size = 10;
  /// A statement timeout the bouncer sets on each server connection it
  /// opens (its connect_query); none keeps the server's default.
  std::optional<std::chrono::milliseconds> server_statement_timeout;
};

/// A pool's figures from the bouncer's admin console (SHOW POOLS).
struct pool_figures {
  /// Client connections linked to a server connection or idle.
  int clients_active = 0;
  /// Client connections waiting for a server connection.
  int clients_waiting = 0;
  /// Server connections open (active, idle, used, tested or logging in).
  int servers = 0;
};

class pgbouncer {
public:
  /// Writes the configuration and starts the bouncer on a free port; waits
  /// until it serves the test database. Throws (with the end of its log)
  /// when it does not start.
  explicit pgbouncer(pgbouncer_options opts = {});

  pgbouncer(const pgbouncer&) = delete;
  pgbouncer& operator=(const pgbouncer&) = delete;

  /// Kills it (if running).
  ~pgbouncer();

  /// `server_dsn` (default: the test database's) with the bouncer's host
  /// and port instead of the server's.
  std::string dsn(const std::string& server_dsn) const;
  std::string dsn() const;

  int port() const noexcept {
    return port_;
  }

  /// kill -9: every client connection through it drops at once.
  void kill();

  /// Starts it again on the same port after kill(); does nothing while it
  /// runs.
  void start();

  /// The admin console's KILL of database `dbname`: drops its client and
  /// server connections while the bouncer keeps running; new clients wait
  /// until resume().
  void kill_clients(const std::string& dbname);

  /// The admin console's RESUME of database `dbname`, after kill_clients().
  void resume(const std::string& dbname);

  /// The figures of database `dbname`'s pool (zeros when it has none).
  pool_figures pool(const std::string& dbname) const;

  /// Its log so far (for failure messages).
  std::string log() const;

private:
  /// Runs one statement on the admin console.
  void admin(const std::string& statement) const;

  temp_dir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

} // namespace cmdbus::test
