#pragma once

// The credits of one domain, as plain bookkeeping the supervisor keeps (no
// actor, so that each rule is tested alone, tests/unit/credit_ledger_test).
//
// A credit is the poller's permission to read one message. Every slot a
// domain has (local handlers, connected remote pools, the prefetch) stands
// for one credit, which is at any time in exactly one place: held by the
// poller (granted), taken by a command that waits or runs (held by the
// supervisor), or freed and not yet returned (pending). When a remote pool
// vanishes, or the auto prefetch shrinks, credits the poller or commands
// still hold for the slots gone become a debt that freed slots pay before
// anything is returned. So:
//
//   granted + held + pending - debt == capacity
//
// outside a drain (which retires credits). Pending credits go back to the
// poller in groups, at most up to the hold limit (what may be held at once:
// read, running or handed to a writer and not committed), so that reads
// stay large under load.

#include <cstdint>

namespace cmdbus::actors {

/// The credits of one domain (see the top of this file).
class credit_ledger {
public:
  /// Starts with `granted` credits at the poller and `debt` owed.
  void start(int64_t granted, int64_t debt) noexcept {
    granted_ = granted;
    debt_ = debt;
  }

  /// The poller used `n` credits: it read that many messages.
  void used(int64_t n) noexcept {
    granted_ -= n;
  }

  /// `n` slots became free (or joined, with a remote pool): they pay the
  /// debt first, the rest become pending credits. Returns whether any did.
  bool freed(int64_t n) noexcept;

  /// Takes the pending credits that may go out now, at most `room` (the
  /// hold limit less what is held and granted), and starts a new epoch
  /// (older credit_due timers are stale). Returns how many to send (≤ 0:
  /// none); withheld() then says whether some stay back.
  int64_t release(int64_t room) noexcept;

  /// `n` credits went to the poller.
  void sent(int64_t n) noexcept {
    granted_ += n;
  }

  /// The capacity shrank by `n` (a smaller prefetch): taken from the
  /// pending credits first, the rest becomes debt.
  void shrunk(int64_t n) noexcept;

  /// A remote pool of `slots` vanished, and `dropped` of the commands it
  /// ran left with it: the slots it no longer backs come back from the
  /// pending credits first, the rest become debt.
  void pool_dropped(int64_t slots, int64_t dropped) noexcept;

  /// Whether the invariant at the top of this file holds for `held`
  /// commands (waiting or running) and `capacity` slots.
  bool balanced(int64_t held, int64_t capacity) const noexcept {
    return granted_ + held + pending_ - debt_ == capacity;
  }

  /// Credits the poller holds (it reads at most that many messages).
  int64_t granted() const noexcept {
    return granted_;
  }

  /// Freed slots not yet returned to the poller.
  int64_t pending() const noexcept {
    return pending_;
  }

  /// Credits owed for vanished remote pools.
  int64_t debt() const noexcept {
    return debt_;
  }

  /// Whether the hold limit kept pending credits back at the last release
  /// (they go out as side effects commit).
  bool withheld() const noexcept {
    return withheld_;
  }

  /// Incremented by every release; a credit_due timer of an older epoch is
  /// stale.
  uint64_t epoch() const noexcept {
    return epoch_;
  }

private:
  int64_t granted_ = 0;
  int64_t pending_ = 0;
  int64_t debt_ = 0;
  bool withheld_ = false;
  uint64_t epoch_ = 0;
};

} // namespace cmdbus::actors
