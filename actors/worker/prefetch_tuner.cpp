#include "cmdbus/actors/worker/prefetch_tuner.hpp"

#include <algorithm>
#include <cstdlib>

namespace cmdbus::actors {

int64_t prefetch_tuner::target(int64_t slots,
                               std::chrono::nanoseconds mean) noexcept {
  if (slots <= 0)
    return 0;
  // At least one nanosecond: a clock that did not move means "very quick".
  auto per = std::max<int64_t>(mean.count(), 1);
  auto budget = std::chrono::nanoseconds{horizon}.count();
  // slots x horizon / mean, without overflowing for tiny means.
  if (budget / per >= limit)
    return limit;
  return std::min(limit, slots * budget / per);
}

std::optional<int64_t>
prefetch_tuner::finished(std::chrono::nanoseconds d) noexcept {
  auto ns = static_cast<double>(std::max<int64_t>(d.count(), 0));
  mean_ns_ = mean_ns_ == 0 ? ns : mean_ns_ + (ns - mean_ns_) / 8;
  if (++since_ < std::max<int64_t>(slots_, 1))
    return std::nullopt;
  since_ = 0;
  auto next = target(slots_, mean());
  // A change of a quarter or more (any change from or to 0).
  auto moved = std::abs(next - current_);
  if (moved == 0 || (current_ > 0 && next > 0 && moved * 4 < current_))
    return std::nullopt;
  current_ = next;
  return next;
}

} // namespace cmdbus::actors
