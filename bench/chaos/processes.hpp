#pragma once

// Processes in a chaos scenario: DemoOrder processes (apps/demo_workflows)
// in a domain of their own, served by the same worker fleet, started spread
// over the sending time while the faults hit, then checked: every process
// in the final status its input leads to, with exactly the steps (one
// command each) and replies that path has, none missing, none twice.
//
// A start that fails is retried until the process is found (by its order
// id, which the process's state holds) or the harness gives up: a start
// whose commit succeeded but whose answer was lost is not started twice.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::chaos {

struct scenario_report;

/// The processes of a scenario.
struct process_plan {
  std::string domain;
  /// Order i charges "ok" (COMPLETED) when even, "declined" (CANCELED after
  /// its Release) when odd.
  int count = 0;
  /// A unique prefix of the order ids.
  std::string prefix;
};

/// Returns the order id of process `i` of `plan`.
std::string order_id_of(const process_plan& plan, int i);

/// Starts the processes of a plan from a thread of its own, evenly over a
/// duration.
class process_starter {
public:
  process_starter(process_plan plan, std::string dsn,
                  std::chrono::milliseconds duration,
                  std::chrono::milliseconds give_up_after);
  process_starter(const process_starter&) = delete;
  process_starter& operator=(const process_starter&) = delete;
  ~process_starter();

  void start();
  /// Waits until every process is started (or given up); joins.
  void finish();

  int64_t started() const noexcept {
    return started_;
  }
  int64_t failed_attempts() const noexcept {
    return failed_attempts_;
  }
  int64_t given_up() const noexcept {
    return given_up_;
  }

private:
  void run();

  process_plan plan_;
  std::string dsn_;
  std::chrono::milliseconds duration_;
  std::chrono::milliseconds give_up_after_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> started_{0};
  std::atomic<int64_t> failed_attempts_{0};
  std::atomic<int64_t> given_up_{0};
  std::thread thread_;
};

/// Returns how many processes of `domain` are not in a final status.
int64_t unsettled_processes(db::connection& conn, const std::string& domain);

/// Checks the processes of `plan` on `conn` and fills in the process
/// figures of `r`.
void check_processes(db::connection& conn, const process_plan& plan,
                     scenario_report& r);

} // namespace cmdbus::chaos
