#pragma once

// What the process manager's actors of one reply queue of a domain need to
// know: the domain, the queue, the process types they serve, the worker's
// configuration and the workflows (values), and the links of the running
// worker (metrics, health).

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cmdbus/actors/ops/health.hpp"
#include "cmdbus/actors/ops/metrics.hpp"
#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/process/registry.hpp"
#include "cmdbus/process/runtime_types.hpp"

namespace cmdbus::actors {

struct process_settings {
  std::string domain;
  /// The reply queue read: `{domain}__process_replies`, or a queue of its
  /// own of some of the domain's process types.
  std::string queue;
  /// The process types of the domain this worker serves: only replies to
  /// their processes (and messages no process manager can apply) are read
  /// from the queue; every other message is left untouched.
  std::vector<std::string> types;
  /// Whether this router sweeps for the domain's processes whose step is in
  /// the troubleshooting queue (one router per domain does).
  bool sweep_tsq = true;
  std::shared_ptr<const config::worker_config> cfg;
  std::shared_ptr<const process_registry> registry;
  /// The domain's metrics (the router's and writers' database errors, in
  /// other_db_errors); may be null in tests.
  std::shared_ptr<domain_metrics> metrics;
  /// The domain's health inputs (the router's and writers' outages); may
  /// be null in tests.
  std::shared_ptr<domain_health_counters> health;
  /// Writers (connections) applying replies.
  int writers = 2;
  /// Replies read and not yet dealt with, at most.
  int max_in_flight = 64;
  /// A reply that fails this many reads (its workflow throws) is archived
  /// with a log line instead of being read again.
  int max_reads = 5;
  /// A process actor with nothing to do for this long is stopped.
  std::chrono::milliseconds idle_after{2000};
  /// How often the router looks for processes whose step is in the TSQ.
  std::chrono::milliseconds sweep_every{5000};
};

/// Where a process router or writer of `s` counts its failed database
/// round trips (null without metrics).
inline std::shared_ptr<std::atomic<int64_t>>
process_db_errors(const process_settings& s) {
  if (!s.metrics)
    return nullptr;
  // Shares the ownership of the metrics it points into.
  return {s.metrics, &s.metrics->other_db_errors};
}

/// The database session of a process writer of `s`. A writer, as the
/// completion writer: the same connection settings and the writers' backoff
/// cap (session_options::max_backoff), so that after an outage or a
/// failover the processes move on as soon as the commands' outcomes do.
inline session_options process_session_options(const process_settings& s) {
  session_options opts;
  opts.dsn = config::dsn_for(*s.cfg, s.domain);
  opts.statement_timeout = s.cfg->statement_timeout;
  opts.application_name = "cmdbus-processes";
  opts.pooler = s.cfg->pooler;
  return opts;
}

/// The database session of a process router of `s`. A reader, as the
/// poller: its backoff is capped at error-backoff-max.
inline session_options process_router_session_options(const process_settings& s) {
  auto opts = process_session_options(s);
  opts.max_backoff = s.cfg->error_backoff_max;
  return opts;
}

} // namespace cmdbus::actors
