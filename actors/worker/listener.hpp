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
