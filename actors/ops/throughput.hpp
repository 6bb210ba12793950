#pragma once

// The throughput of a process's status views: counts sampled once a second
// and kept for a minute, per series (a worker's domains, a node's handled
// commands). One sampler per process feeds every view that shows the
// throughput (the status page and the admin actor of a worker, the admin
// actor of a node). Plain C++ (no CAF).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace cmdbus {

/// Counts sampled at moments, the samples of the last `span` kept (plus
/// the one just before it): the rate of each series over that window.
/// Not thread-safe (throughput_sampler guards it).
class throughput_window {
public:
  using clock = std::chrono::steady_clock;

  explicit throughput_window(clock::duration span
                             = std::chrono::seconds{60}) noexcept
    : span_(span) {
    // nop
  }

  /// Adds the counts of every series at `at` (later than the last sample).
  void add(clock::time_point at, std::vector<int64_t> counts);

  /// Series `i` per second between the oldest and the newest sample kept;
  /// unset before two samples (or when `i` was not sampled).
  std::optional<double> rate(size_t i) const;

  /// Every series' rate (as many as the newest sample has).
  std::vector<std::optional<double>> rates() const;

private:
  struct sample {
    clock::time_point at;
    std::vector<int64_t> counts;
  };
  clock::duration span_;
  /// Oldest first.
  std::deque<sample> samples_;
};

/// Samples counts every `every` on a thread of its own, into a window of a
/// minute. Thread-safe.
class throughput_sampler {
public:
  /// Reads the counts of every series now (called on the sampler's thread;
  /// always the same number of series).
  using read_fn = std::function<std::vector<int64_t>()>;

  /// Takes the first sample and starts sampling.
  explicit throughput_sampler(read_fn read, std::chrono::milliseconds every
                                            = std::chrono::seconds{1});
  /// Stops sampling and joins the thread.
  ~throughput_sampler();
  throughput_sampler(const throughput_sampler&) = delete;
  throughput_sampler& operator=(const throughput_sampler&) = delete;

  /// Every series' rate over the last minute (unset before the second
  /// sample).
  std::vector<std::optional<double>> rates() const;

private:
  void run();

  read_fn read_;
  std::chrono::milliseconds every_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool stopping_ = false;
  throughput_window window_;
  std::thread thread_;
};

} // namespace cmdbus
