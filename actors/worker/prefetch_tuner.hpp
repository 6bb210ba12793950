#pragma once

// The prefetch of a domain whose configuration says `prefetch = auto` (the
// default), as plain bookkeeping the supervisor keeps (no actor, so that
// the rule is tested alone, tests/unit/prefetch_tuner_test).
//
// A prefetched message waits in memory for a free handler slot. Reads are
// the worker's critical path (one poller per domain, docs/performance.md),
// so quick handlers need many messages per read: with 16 slots and no
// prefetch, no-op handlers ran at a quarter of the rate that reads of up
// to 272 gave (docs/performance.md).
// Slow handlers need none: a message read ahead of a 10 s handler only
// waits, while another worker could have run it. So the prefetch is sized
// by the measured time a command holds a slot: as many messages as the
// slots work off within `horizon`,
//
//     prefetch = slots x horizon / mean slot time,  0 <= prefetch <= limit
//
// re-evaluated once per `slots` finished commands, and changed only when it
// moves by a quarter or more (so that the credits do not churn). The mean
// is exponentially weighted (1/8 per command). The leases of prefetched
// messages are extended like those of running ones, so even a handler that
// slows down suddenly loses no message: what was read ahead waits, and the
// prefetch shrinks as the slow commands finish.

#include <chrono>
#include <cstdint>
#include <optional>

namespace cmdbus::actors {

/// The auto prefetch of one domain (see the top of this file).
class prefetch_tuner {
public:
  /// How long a prefetched message may expect to wait for a slot.
  static constexpr std::chrono::milliseconds horizon{100};
  /// The largest prefetch chosen (its reads then take up to slots + 256).
  static constexpr int64_t limit = 256;

  /// A domain with `slots` local handler slots; the prefetch starts at 0.
  explicit prefetch_tuner(int64_t slots) noexcept : slots_(slots) {
  }

  /// A command held a slot for `d`. Returns the new prefetch when it
  /// changed, else nothing.
  std::optional<int64_t> finished(std::chrono::nanoseconds d) noexcept;

  /// The prefetch now.
  int64_t current() const noexcept {
    return current_;
  }

  /// The mean slot time measured so far (0 before the first command).
  std::chrono::nanoseconds mean() const noexcept {
    return std::chrono::nanoseconds{static_cast<int64_t>(mean_ns_)};
  }

  /// The prefetch `slots` slots should have for a mean slot time `mean`.
  static int64_t target(int64_t slots, std::chrono::nanoseconds mean) noexcept;

private:
  int64_t slots_;
  int64_t current_ = 0;
  double mean_ns_ = 0;
  int64_t since_ = 0;
};

} // namespace cmdbus::actors
