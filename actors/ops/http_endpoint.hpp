#pragma once

// The worker's HTTP endpoint (opt-in: [worker] http / --http), served by an
// http_server (actors/ops/http_server.hpp: cpp-httplib's routing behind a
// front that bounds connections and their read time) on its own threads:
//   GET /healthz  200 while HEALTHY or DEGRADED, 503 when CRITICAL (JSON)
//   GET /readyz   200 once every domain polls, 503 while starting or
//                 draining (JSON)
//   GET /metrics  the Prometheus text format (actors/ops/exposition.hpp)
//   GET /         a status page that refreshes itself
// Every page renders the worker's status view (status_snapshot.hpp, read
// from the actors' atomics at each request); the queue figures cost one
// statement, at most once per second whatever the number of scrapers, on
// the endpoint's own connection. No httplib or CAF in this header.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cmdbus/actors/ops/http_server.hpp"
#include "cmdbus/actors/ops/status_snapshot.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus {

/// What the endpoint shows; the worker provides it.
struct status_source {
  /// The worker's status view without queue figures (build_status);
  /// called on the endpoint's threads.
  std::function<status_snapshot()> snapshot;
  /// The worker's domains, in the order of the status view's.
  std::vector<std::string> domains;
  /// Where the queue figures are read: `dsn`, or the domain's own
  /// (config::dsn_for).
  std::string dsn;
  std::map<std::string, std::string> domain_dsn;
  /// The connection pooler in front of the databases.
  db::pooler_mode pooler = db::pooler_mode::none;
  /// The domains whose processes the worker drives (their live processes
  /// are read with the queue figures).
  std::vector<std::string> process_domains;
};

class http_endpoint {
public:
  /// Listens on `where` and serves in the background. Throws
  /// std::runtime_error when it cannot listen (the port is taken, the
  /// address is not local).
  http_endpoint(const config::http_address& where, status_source source);
  /// Stops serving and joins its threads.
  ~http_endpoint();
  http_endpoint(const http_endpoint&) = delete;
  http_endpoint& operator=(const http_endpoint&) = delete;

  /// The port it listens on (the one the system picked for port 0).
  int port() const noexcept;

  /// What its clients may take: 256 connections, 2 s to send a request,
  /// 5 s idle between requests, 5 s to write an answer, no bodies, 2
  /// threads with 16 requests waiting, and a thread of their own for
  /// /healthz and /readyz.
  static http_limits limits();

  /// The full snapshot, as a request sees it.
  status_snapshot snapshot();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace cmdbus
