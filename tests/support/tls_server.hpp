#pragma once

// A PostgreSQL 15 server that takes TCP connections over TLS only, built in
// a temporary folder (initdb, pg_ctl) and removed with it: for the tests of
// cmdbus over TLS with sslmode=verify-full. Its certificate, for the host
// name "localhost", is signed by a CA made for it with the `openssl` tool
// (tests/support/certificates.hpp); a second CA signs nothing of it, for
// the refusals. TCP on 127.0.0.1 takes only TLS connections with a password
// (scram-sha-256) for the role `cmdbus`; its unix socket, in a folder of its
// own, trusts local users (the test's own checks). As root it runs as the
// `postgres` system user (tests/support/server_programs.hpp).

#include <string>
#include <vector>

namespace cmdbus::test {

class tls_server {
public:
  /// Makes the certificates, creates and starts the server with the
  /// database `dbname`. Throws (with the server's log tail) when a step
  /// fails.
  explicit tls_server(std::string dbname = "cmdbus");

  tls_server(const tls_server&) = delete;
  tls_server& operator=(const tls_server&) = delete;

  /// Stops the server (immediate mode) and removes the folder.
  ~tls_server();

  /// The TCP port on 127.0.0.1.
  int port() const noexcept {
    return port_;
  }

  /// The password of the role `cmdbus`.
  const std::string& password() const noexcept {
    return password_;
  }

  /// The file of the CA that signed the server's certificate.
  std::string ca_file() const;

  /// The file of a CA that signed nothing this server has.
  std::string other_ca_file() const;

  /// A DSN of the database over TLS with sslmode=verify-full, trusting
  /// ca_file(), to host "localhost" at 127.0.0.1 (hostaddr) and `port` (0:
  /// the server's own; another: e.g. a proxy's), without a password.
  std::string dsn(int port = 0) const;

  /// A DSN of the database over the unix socket (trusted, no TLS), for the
  /// test's own checks.
  std::string socket_dsn() const;

  /// Restarts the server in immediate mode (every connection drops, as in
  /// a crash) and waits until it takes connections again.
  void restart();

  /// The last lines of the server's log (for failure messages).
  std::string logs() const;

private:
  /// Stops what runs and removes the folder.
  void shut_down() noexcept;

  void run(const std::string& program, const std::vector<std::string>& args);

  std::string dbname_;
  std::string dir_;
  std::string password_;
  int port_ = 0;
  bool alive_ = false;
};

} // namespace cmdbus::test
