#pragma once

// The one backoff curve and the one jitter of the library: every delay that
// grows with consecutive failures (reconnects, domain restarts, the
// poller's idle reads) is a capped exponential, every randomised delay is
// that value scaled by a factor drawn from a range, and the retry delays of
// commands come from their schedule. No libpq, no CAF.

#include <random>
#include <vector>

namespace cmdbus::backoff {

/// Returns `initial * multiplier^(step - 1)`, capped at `max`; 0 for
/// `step <= 0`. Units are the caller's (milliseconds everywhere so far).
double exponential(int step, double initial, double multiplier,
                   double max) noexcept;

/// Returns `value` scaled by a factor drawn uniformly from [low, high]
/// using `rng` (e.g. [0.5, 1.0]: somewhere in the second half of the delay;
/// [0.8, 1.2]: +/- 20 %), so that clients that failed together do not
/// retry together.
double jitter(double value, double low, double high, std::mt19937_64& rng);

/// Returns the delay of a retry schedule after failed attempt `attempt`
/// (1-based): schedule[attempt - 1], the first entry for attempt <= 0, the
/// last one beyond its end, `fallback` when it is empty.
int from_schedule(const std::vector<int>& schedule, int attempt,
                  int fallback) noexcept;

} // namespace cmdbus::backoff
