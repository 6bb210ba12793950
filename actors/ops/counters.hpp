#pragma once

// The counters a running worker's actors update (internal: applications see
// a worker_stats snapshot through worker::stats()).

#include <atomic>
#include <cstdint>

namespace cmdbus {

/// Counters of a running worker (all domains), updated by its actors.
struct worker_counters {
  /// Commands read and not yet handled (running in a handler or waiting
  /// for one); never more than the concurrency per domain.
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> received{0};
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> retried{0};
  std::atomic<int64_t> moved_to_tsq{0};
  std::atomic<int64_t> failed{0};
  /// Messages archived on receive (invalid, unknown or terminal command).
  std::atomic<int64_t> rejected{0};
  /// Handler actors that died and were replaced.
  std::atomic<int64_t> handler_restarts{0};
  /// Failed database round trips (each retried with backoff).
  std::atomic<int64_t> db_errors{0};
  /// Outcomes not written because their delivery no longer held its
  /// message: read again meanwhile (its visibility timeout had expired),
  /// or its claim was lost by the database (a failover).
  std::atomic<int64_t> stale{0};
};

} // namespace cmdbus
