#pragma once

// Bridges LISTEN/NOTIFY into the actor world for a reader of a queue (the
// poller of a command queue, the router of a process reply queue): a thread
// blocks on its own connection (a db_session, which reconnects with backoff
// and logs the outage and the recovery once each) and calls `wake` for
// every burst of notifications, and once after each (re)connection, since
// anything sent while it was not listening must be read. Stopping joins
// the thread. Its failures are not counted as the worker's database errors
// (only the actors' round trips are).

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "cmdbus/actors/worker/db_session.hpp"

namespace cmdbus::actors {

/// Coalesces the requests for a read of one reader: the listener thread's
/// on a NOTIFY and the reader's own (on credits, after a full read). Only
/// the first request after the reader took its last wakeup sends one, so a
/// burst of NOTIFYs during a read costs one more read, not one each. (One
/// read per NOTIFY kept a poller busy at a few hundred commands a second,
/// and its credits waited behind the queued wakeups.) A request made after
/// take() sends a new wakeup, so nothing committed after a read started
/// waits for the poll timer.
class wakeup_latch {
public:
  /// Returns whether the caller sends the wakeup (none is pending).
  bool raise() noexcept {
    return !pending_.exchange(true, std::memory_order_acq_rel);
  }

  /// The reader took the wakeup, before it reads.
  void take() noexcept {
    pending_.store(false, std::memory_order_release);
  }

private:
  std::atomic<bool> pending_{false};
};

class listener {
public:
  /// Listens on `channel` as `who` ("listener/payments" in log lines).
  listener(std::string who, std::string dsn, std::string channel,
           std::function<void()> wake);
  ~listener();
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;

private:
  static session_options options(std::string dsn);
  void loop();

  std::string channel_;
  std::function<void()> wake_;
  db_session session_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace cmdbus::actors
