#pragma once

// Running a worker in the integration tests: a configuration with small
// timings and a bounded stop. Includes what nearly every worker test uses:
// the bus (bus_env.hpp), the state checks (sql_checks.hpp), gates
// (gate.hpp), scope guards (finally.hpp) and deadlines (eventually.hpp).

#include <atomic>
#include <chrono>

#include "cmdbus/actors/handler_registry.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/finally.hpp"
#include "tests/support/gate.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::test {

using namespace std::chrono_literals;

/// A worker configuration for `domains` with small timings: 5 s leases, a
/// 100 ms poll interval besides NOTIFY, a 2 s statement timeout, and 3
/// attempts retried at once (backoff 0, no jitter).
config::worker_config make_cfg(const strings& domains, int concurrency = 4);

/// A handler that does nothing and succeeds with a null result.
json null_result(const command&, handler_context&);

/// A handler that holds each command until `release` opens (at most
/// `max`), counting the commands that entered it: for tests that keep slots
/// busy. It must outlive the worker that runs fn().
struct holding_handler {
  gate release;
  std::atomic<int> entered{0};
  std::chrono::milliseconds max = 60s;

  handler_fn fn() {
    return [this](const command&, handler_context&) -> json {
      ++entered;
      release.wait(max);
      return json::null();
    };
  }
};

/// Stops `w` (if running) within `timeout`.
void stop_worker(worker& w, std::chrono::milliseconds timeout = 10s);

} // namespace cmdbus::test
