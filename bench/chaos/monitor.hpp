#pragma once

// Progress of a chaos scenario as seen from the database: how many of the
// domain's commands are in a final status, sampled every 200 ms from a
// thread of its own (reconnecting after faults), and from the samples the
// time each fault took to recover from.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/chaos/process.hpp"

namespace cmdbus::chaos {

/// The SQL list of the statuses in which a command stays.
inline constexpr const char* final_statuses
  = "('COMPLETED', 'FAILED', 'CANCELED', 'IN_TROUBLESHOOTING_QUEUE')";

/// One fault and when it ended (the moment service could resume).
struct fault_record {
  std::string what;
  clock::time_point start;
  clock::time_point end;
  /// Seconds from `end` until the final count grew again; unset when it
  /// never did while the monitor ran.
  std::optional<double> recovery_seconds;
};

/// Samples the count of final commands of a domain.
class progress_monitor {
public:
  struct sample {
    clock::time_point at;
    int64_t final_count = 0;
  };

  progress_monitor(std::string dsn, std::string domain);
  progress_monitor(const progress_monitor&) = delete;
  progress_monitor& operator=(const progress_monitor&) = delete;
  ~progress_monitor();

  void start();
  void stop();

  /// A copy of the samples so far.
  std::vector<sample> samples() const;

private:
  void run();

  std::string dsn_;
  std::string domain_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mtx_;
  std::vector<sample> samples_;
};

/// Fills in the recovery time of every fault: the time from its end to the
/// first sample whose count exceeds that of the first sample taken after
/// the end (so the resolution is about two sample periods).
void compute_recovery(std::vector<fault_record>& faults,
                      const std::vector<progress_monitor::sample>& samples);

} // namespace cmdbus::chaos
