#pragma once

// Client-side group commit: concurrent `command_bus::send` calls share
// transactions, and each caller still gets exactly its own outcome.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "cmdbus/db/prepared_command.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus::db {

/// Combines concurrent sends into shared transactions. Each call queues its
/// command; a call that finds a free leader slot takes everything queued
/// (up to `max_group_size`, oldest first) and sends it as one group, then
/// wakes the others, which return once their own command is done. The first
/// leader takes whatever is queued, so that a lone caller never waits for
/// others; a further one starts only for two or more queued commands and
/// while fewer than `max_concurrent` groups are in flight, so that
/// concurrent callers combine into fewer transactions (each commit with a
/// NOTIFY waits for the previous one).
///
/// A group's outcome becomes each member's: when the shared transaction
/// fails as a whole for a reason other than a broken connection (say, one
/// duplicate), every member is sent again on its own, so each caller gets
/// the outcome of sending alone. A broken connection fails the whole group
/// (sending again would only repeat it).
///
/// Thread-safe. Knows nothing of the database: the bus passes the two ways
/// of sending.
class send_combiner {
public:
  /// One caller's command in the combiner, and its outcome once `done`.
  struct pending {
    prepared_command item;
    bool done = false;
    send_result result;
    std::exception_ptr error;
  };

  /// Commands sent together, oldest first.
  using group = std::vector<std::shared_ptr<pending>>;

  /// Sends a group of two or more in one transaction and sets each
  /// member's `result`, or its `error` when the failure concerns that member
  /// alone (the others committed). Throws when the transaction fails as a
  /// whole.
  using send_together_fn = std::function<void(const group&)>;

  /// Sends one command in a transaction of its own; throws its failure.
  using send_alone_fn = std::function<send_result(const prepared_command&)>;

  /// @param max_group_size Most commands in one group (at least 1).
  /// @param max_concurrent Most groups in flight at once (at least 1).
  send_combiner(size_t max_group_size, size_t max_concurrent,
                send_together_fn send_together, send_alone_fn send_alone);

  send_combiner(const send_combiner&) = delete;
  send_combiner& operator=(const send_combiner&) = delete;

  /// Sends `item`, possibly in one transaction with concurrent calls, and
  /// returns its result or throws its own failure.
  send_result send(prepared_command item);

  /// Returns how many commands wait for a leader (for tests).
  size_t queued() const;

private:
  // Whether a caller may lead a group now; needs `mtx_`.
  bool may_lead() const;

  // Takes the next group off the queue; needs `mtx_`.
  group take_group();

  // Sends `g` and records each member's outcome.
  void run(const group& g) noexcept;

  size_t max_group_size_;
  size_t max_concurrent_;
  send_together_fn send_together_;
  send_alone_fn send_alone_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<pending>> queue_;
  size_t leaders_ = 0;
};

} // namespace cmdbus::db
