#pragma once

// Synchronising with handlers in the worker tests: a gate handlers block on
// and a probe counting the handlers running at once.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace cmdbus::test {

/// A one-shot latch handlers wait on until the test opens it; `wait` gives
/// up after `max` so that a failing test never hangs a worker's shutdown
/// forever.
class gate {
public:
  /// Lets every waiter (present and future) through.
  void open() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      open_ = true;
    }
    cv_.notify_all();
  }

  /// Waits until the gate is open (true) or `max` passed (false).
  bool wait(std::chrono::milliseconds max = std::chrono::seconds{10}) {
    std::unique_lock<std::mutex> lock{mtx_};
    return cv_.wait_for(lock, max, [this] { return open_; });
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// Counts handlers running at once and the most seen so far.
class concurrency_probe {
public:
  /// A handler starts; returns how many run now.
  int enter() {
    auto now = ++running_;
    auto seen = max_.load();
    while (now > seen && !max_.compare_exchange_weak(seen, now)) {
      // retry
    }
    return now;
  }

  /// A handler ends.
  void leave() {
    --running_;
  }

  /// Returns how many handlers run now.
  int running() const {
    return running_.load();
  }

  /// Returns the most handlers that ran at once.
  int max() const {
    return max_.load();
  }

private:
  std::atomic<int> running_{0};
  std::atomic<int> max_{0};
};

} // namespace cmdbus::test
