#pragma once

// The sender of a chaos scenario: sends a load plan over the scenario's
// sending time while the faults hit, retrying failed sends with the same
// ids until it knows they went through.
//
// A send that never returns (a client stuck after a fault) must not hang
// the harness: the sender can be abandoned. Its threads then keep what they
// use (the plan, the bus, the counters) alive by shared ownership, and
// `sender::any_abandoned()` tells main to leave with _Exit.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/chaos/load.hpp"

namespace cmdbus::chaos {

/// Counters of the sender.
struct send_stats {
  int64_t commands_confirmed = 0;
  int64_t batches_confirmed = 0;
  /// Failed attempts (each retried).
  int64_t failed_attempts = 0;
  /// Retries that found the command or batch already there.
  int64_t found_on_retry = 0;
  /// Units given up after the retry deadline.
  int64_t given_up = 0;
  /// Units whose send was still running when the sender was abandoned.
  int64_t hung = 0;
  std::string last_error;
};

/// Sends a plan from threads of its own, each unit at its due time: spread
/// evenly over `duration` by command count. Several threads keep that pace
/// when single sends slow down (a loaded or recovering database); each unit
/// is sent by exactly one of them.
class sender {
public:
  /// `dsn` is where the sends go (directly or through the proxy).
  sender(std::shared_ptr<load_plan> plan, std::string dsn,
         std::chrono::milliseconds duration,
         std::chrono::milliseconds give_up_after, int threads = 4);
  sender(const sender&) = delete;
  sender& operator=(const sender&) = delete;
  /// Stops the threads at their next pause; abandons those that do not
  /// finish within 10 s.
  ~sender();

  void start();

  /// Returns whether every thread finished (each unit sent or given up).
  bool done() const noexcept;

  /// Returns whether every thread either finished or has been inside one
  /// send attempt for longer than `hung_after` (a call of the bus that
  /// never returns: a client stuck after a fault).
  bool done_or_hung(std::chrono::milliseconds hung_after) const noexcept;

  /// Waits up to `timeout` for every thread to finish, then joins them
  /// (true; rethrows what ended one abnormally) or abandons them (false).
  bool finish_within(std::chrono::milliseconds timeout);

  /// A snapshot of the counters.
  send_stats stats() const;

  /// Whether any sender of this process was abandoned.
  static bool any_abandoned() noexcept;

private:
  struct state;
  static void run(const std::shared_ptr<state>& st, size_t thread,
                  std::chrono::steady_clock::time_point start);
  void abandon();

  std::shared_ptr<state> st_;
  std::vector<std::thread> threads_;
};

} // namespace cmdbus::chaos
