#pragma once

// The status view of a worker: what its HTTP endpoint (the status page,
// /healthz, /readyz, /metrics) and its admin actor (`cmdbus cluster
// status`) show, copied at one moment from the domains' metrics and health
// by one function (build_status), plus the last queue figures, which the
// HTTP endpoint adds. Plain data, so that the renderers (exposition.hpp,
// status_page.hpp, admin_view.hpp) are functions of it and testable
// without a worker, a server or a database.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/actors/ops/health.hpp"
#include "cmdbus/actors/ops/metrics.hpp"
#include "cmdbus/db/stats.hpp"

namespace cmdbus {

/// The tallies of one command type.
struct type_status {
  std::string command_type;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t retried = 0;
  int64_t moved_to_tsq = 0;
  duration_histogram::snapshot duration;
};

/// One domain.
struct domain_status {
  domain_health health;
  /// Whether the domain's poller has read since the worker started.
  bool polling = false;
  int64_t received = 0;
  int64_t in_flight = 0;
  /// The domain's prefetch now (fixed, or chosen by `prefetch = auto`).
  int64_t prefetch = 0;
  int64_t slots = 0;
  int64_t handler_restarts = 0;
  /// Slots of the connected remote handler pools, how many are connected,
  /// and how many were lost so far.
  int64_t remote_slots = 0;
  int64_t remote_pools = 0;
  int64_t remote_disconnects = 0;
  /// Schedule slots fired, their summed and last lateness (microseconds).
  int64_t schedule_fired = 0;
  int64_t schedule_lateness_us = 0;
  int64_t schedule_last_lateness_us = 0;
  /// The remote pools configured ("HOST:PORT").
  std::vector<std::string> configured_pools;
  /// Indexed like all_db_actors.
  std::array<int64_t, all_db_actors.size()> db_errors{};
  /// By name.
  std::vector<type_status> types;
  /// Commands finished (outcome_totals::finished) so far, over all types.
  int64_t finished = 0;
  /// Commands finished per second over the last minute (or since the
  /// worker started, when that is shorter); unset before two samples.
  std::optional<double> finished_per_second;
  /// The command queue and TSQ figures of the last read; unset when they
  /// could not be read.
  std::optional<db::queue_figures> queue;
};

/// The whole worker.
/// The counts of one singleton job (see job_metrics).
struct job_status {
  std::string name;
  int64_t ran = 0;
  int64_t skipped = 0;
  int64_t failed = 0;
};

/// The counts of the housekeeping runner (see retention_metrics): rows
/// removed by kind, in the order of the metric's samples.
struct retention_status {
  std::vector<std::pair<std::string, int64_t>> removed;
  /// Partitions of partitioned queues created and dropped.
  int64_t partitions_created = 0;
  int64_t partitions_dropped = 0;
  int64_t chunks = 0;
  int64_t passes = 0;
};

struct status_snapshot {
  std::string version;
  /// The worst domain state.
  health_state state = health_state::healthy;
  /// Whether the worker takes work (see worker::is_ready) and why not:
  /// "ready", "starting", "draining", "drained" (cmdbus cluster drain) or
  /// "stopped".
  bool ready = false;
  std::string readiness;
  double uptime_seconds = 0;
  std::vector<domain_status> domains;
  /// Whether the worker drives processes (then `processes` was read with
  /// the queue figures).
  bool has_processes = false;
  /// Its processes not yet final, by (domain, type, status).
  std::vector<db::process_figures> processes;
  /// Why the queue figures are missing (empty when they were read).
  std::string queue_error;
  /// The singleton jobs registered with the worker, in registration order.
  std::vector<job_status> jobs;
  /// The housekeeping runner's counts, when [retention] is configured.
  std::optional<retention_status> retention;
  /// Seconds since the queue figures were read.
  double queue_age_seconds = 0;
};

/// What one domain's status is built from.
struct domain_source {
  /// Its metrics (never null).
  const domain_metrics* metrics = nullptr;
  /// Its health, evaluated.
  domain_health health;
  /// Whether its poller has read since the worker started.
  bool polling = false;
  /// Its commands finished per second over the last minute (the worker's
  /// throughput sampler, fed by domain_metrics::finished); unset when not
  /// known.
  std::optional<double> finished_per_second;
  /// The remote pools configured for it.
  std::vector<std::string> configured_pools;
};

/// What a worker's status view is built from.
struct status_inputs {
  std::string version;
  bool ready = false;
  std::string readiness;
  double uptime_seconds = 0;
  /// In the configured order.
  std::vector<domain_source> domains;
  /// The singleton jobs' counts (never null), in registration order.
  std::vector<const job_metrics*> jobs;
  /// The housekeeping runner's counts; null when [retention] is off.
  const retention_metrics* retention = nullptr;
};

/// Builds the status view: per domain its figures copied from its metrics,
/// its health and throughput as given; the worker's state is the worst
/// domain health. Without queue figures (the HTTP endpoint adds them).
status_snapshot build_status(const status_inputs& in);

} // namespace cmdbus
