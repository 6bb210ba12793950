#pragma once

// The workers' own view of a chaos scenario: GET /healthz of every worker
// of the fleet every 100 ms from a thread of its own, keeping each change
// of a worker's answer ("HEALTHY", "DEGRADED", "CRITICAL", or
// "unreachable" while nothing answers, e.g. after a kill -9). The scenario
// checks that the workers said they were unwell during the faults that
// should make them so, and that they all say HEALTHY again afterwards.

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/chaos/process.hpp"

namespace cmdbus::chaos {

class health_watch {
public:
  /// One change of a worker's answer.
  struct change {
    clock::time_point at;
    std::string state;
  };

  /// Watches the workers listening on `ports` (one per worker).
  explicit health_watch(std::vector<int> ports);
  health_watch(const health_watch&) = delete;
  health_watch& operator=(const health_watch&) = delete;
  ~health_watch();

  void start();
  void stop();

  /// Whether any worker answered DEGRADED or CRITICAL between `from` and
  /// `to`.
  bool unwell_between(clock::time_point from, clock::time_point to) const;

  /// Each worker's latest answer.
  std::vector<std::string> latest() const;

  /// Waits until every worker answers HEALTHY, up to `deadline`; returns
  /// whether they did.
  bool wait_all_healthy(clock::time_point deadline) const;

  /// The changes of worker `i`.
  std::vector<change> changes(size_t i) const;

private:
  void run();

  std::vector<int> ports_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mtx_;
  std::vector<std::vector<change>> changes_;
};

/// Reads "status" from a /healthz body; "unreadable" when it has none. A
/// domain DEGRADED only by handler failures in a row (the load's own
/// failing commands, not a fault) counts as HEALTHY.
std::string health_status_of(const std::string& body);

} // namespace cmdbus::chaos
