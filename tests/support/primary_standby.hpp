#pragma once

// A PostgreSQL 15 primary and its streaming standby, asynchronous or
// synchronous, built for one test in a temporary folder (initdb,
// pg_basebackup) and removed with it: for the tests of what a failover does
// to the workers. Both servers
// listen on free ports of 127.0.0.1 and on a socket folder of their own,
// with trust authentication for the role `cmdbus`; as root they run as the
// `postgres` system user (as scripts/pg does).
//
// The standby's replication connection runs through a tcp_proxy, so that a
// test decides how far behind the standby is when the primary dies: after
// freeze_replication() the primary goes on acknowledging commits that the
// standby never receives, and after kill_primary() and promote_standby()
// those transactions are lost, as in a real failover to an asynchronous
// standby. A synchronous standby (synchronous_standby_names on the primary,
// synchronous_commit on) has every commit the primary acknowledged: after
// the failover nothing is lost. Clients that follow a failover use
// failover_dsn(): both hosts, target_session_attrs=read-write.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/tcp_proxy.hpp"

namespace cmdbus::test {

/// How the primary waits for its standby.
enum class replication {
  /// Commits are acknowledged without waiting: the standby may be behind.
  asynchronous,
  /// Every commit waits until the standby flushed it
  /// (synchronous_standby_names names it, synchronous_commit is on).
  synchronous,
};

class primary_standby {
public:
  /// Creates, starts and connects both servers: the primary with database
  /// `dbname`, the standby from a base backup of it, streaming (in `mode`:
  /// once it returns, a synchronous standby is the primary's sync standby).
  /// Throws (with the servers' log tails) when a step fails.
  explicit primary_standby(std::string dbname = "cmdbus",
                           replication mode = replication::asynchronous);

  /// A pair in `mode` with the database "cmdbus".
  explicit primary_standby(replication mode)
    : primary_standby("cmdbus", mode) {}

  primary_standby(const primary_standby&) = delete;
  primary_standby& operator=(const primary_standby&) = delete;

  /// Stops both servers at once (immediate mode) and removes the folder.
  ~primary_standby();

  int primary_port() const noexcept {
    return primary_port_;
  }

  int standby_port() const noexcept {
    return standby_port_;
  }

  /// A DSN of the database on the primary only.
  std::string primary_dsn() const;

  /// A DSN of the database on the standby only.
  std::string standby_dsn() const;

  /// The DSN of a client that follows a failover: the primary, then the
  /// standby, whichever accepts writes (target_session_attrs=read-write).
  std::string failover_dsn() const;

  /// Waits until the standby has replayed all the primary wrote so far;
  /// throws after `deadline`.
  void
  wait_caught_up(std::chrono::milliseconds deadline = std::chrono::seconds{30});

  /// Stops forwarding the replication connection without closing it: the
  /// standby receives nothing more and does not notice, while the primary
  /// (asynchronous) goes on committing. A synchronous primary would wait
  /// for the standby instead: this is for the asynchronous pair.
  void freeze_replication();

  /// kill -9 of the primary's postmaster and all its processes at once,
  /// like the loss of its host: its clients see their connections drop.
  /// Returns when its port refuses connections.
  void kill_primary();

  /// Promotes the standby and waits until it accepts writes.
  void promote_standby();

  /// The last lines of both servers' logs (for failure messages).
  std::string logs() const;

private:
  /// Stops what runs and removes the folder.
  void shut_down() noexcept;

  /// Runs a PostgreSQL program (as the server user when root); throws with
  /// its output and the logs when it fails.
  void run(const std::string& program, const std::vector<std::string>& args);

  std::string dsn(int port) const;

  std::string dbname_;
  std::string dir_;
  int primary_port_ = 0;
  int standby_port_ = 0;
  bool primary_alive_ = false;
  bool standby_alive_ = false;
  std::unique_ptr<tcp_proxy> replication_;
};

} // namespace cmdbus::test
