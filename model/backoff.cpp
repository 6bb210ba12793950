#include "cmdbus/model/backoff.hpp"

#include <algorithm>
#include <cmath>

namespace cmdbus::backoff {

double exponential(int step, double initial, double multiplier,
                   double max) noexcept {
  if (step <= 0)
    return 0;
  return std::min(initial * std::pow(multiplier, step - 1), max);
}

double jitter(double value, double low, double high, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> factor{low, high};
  return value * factor(rng);
}

int from_schedule(const std::vector<int>& schedule, int attempt,
                  int fallback) noexcept {
  if (schedule.empty())
    return fallback;
  if (attempt <= 0)
    return schedule.front();
  auto index = static_cast<size_t>(attempt - 1);
  return index < schedule.size() ? schedule[index] : schedule.back();
}

} // namespace cmdbus::backoff
