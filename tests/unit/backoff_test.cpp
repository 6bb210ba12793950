// The one backoff curve, jitter and retry schedule (model/backoff.hpp), with
// the figures of each caller.

#include "cmdbus/model/backoff.hpp"

#include <gtest/gtest.h>

#include <random>

#include "cmdbus/model/types.hpp"

namespace cmdbus {
namespace {

TEST(Backoff, ExponentialDoublesUpToTheCap) {
  EXPECT_EQ(backoff::exponential(0, 100, 2.0, 2000), 0);
  EXPECT_EQ(backoff::exponential(-3, 100, 2.0, 2000), 0);
  EXPECT_EQ(backoff::exponential(1, 100, 2.0, 2000), 100);
  EXPECT_EQ(backoff::exponential(2, 100, 2.0, 2000), 200);
  EXPECT_EQ(backoff::exponential(5, 100, 2.0, 2000), 1600);
  EXPECT_EQ(backoff::exponential(6, 100, 2.0, 2000), 2000);
  EXPECT_EQ(backoff::exponential(1000, 100, 2.0, 2000), 2000);
}

TEST(Backoff, DomainRestartsDoubleFromOneSecondToAMinute) {
  // The root's curve (actors/worker/root.cpp): 1 s doubling up to 60 s.
  EXPECT_EQ(backoff::exponential(1, 1000, 2.0, 60000), 1000);
  EXPECT_EQ(backoff::exponential(2, 1000, 2.0, 60000), 2000);
  EXPECT_EQ(backoff::exponential(7, 1000, 2.0, 60000), 60000);
}

TEST(Backoff, JitterStaysInItsRange) {
  std::mt19937_64 rng{42};
  for (int i = 0; i < 1000; ++i) {
    auto x = backoff::jitter(1000, 0.5, 1.0, rng);
    EXPECT_GE(x, 500);
    EXPECT_LE(x, 1000);
    auto y = backoff::jitter(1000, 0.8, 1.2, rng);
    EXPECT_GE(y, 800);
    EXPECT_LE(y, 1200);
  }
  EXPECT_EQ(backoff::jitter(0, 0.5, 1.0, rng), 0);
}

TEST(Backoff, ScheduleIsClampedToItsEnds) {
  std::vector<int> s{10, 60, 300};
  EXPECT_EQ(backoff::from_schedule(s, 0, 30), 10);
  EXPECT_EQ(backoff::from_schedule(s, 1, 30), 10);
  EXPECT_EQ(backoff::from_schedule(s, 2, 30), 60);
  EXPECT_EQ(backoff::from_schedule(s, 3, 30), 300);
  EXPECT_EQ(backoff::from_schedule(s, 9, 30), 300);
  EXPECT_EQ(backoff::from_schedule({}, 2, 30), 30);
}

TEST(Backoff, CallersKeepTheirFigures) {
  // The reconnect delay of the pool and the actors' sessions
  // (db::jittered_backoff): 100 ms doubling, drawn from [d/2, d].
  std::mt19937_64 rng{7};
  for (int i = 0; i < 100; ++i) {
    auto d = backoff::jitter(backoff::exponential(3, 100, 2.0, 2000), 0.5,
                             1.0, rng);
    EXPECT_GE(d, 200);
    EXPECT_LE(d, 400);
  }
  // A command's retry policy.
  retry_policy p;
  EXPECT_EQ(p.backoff(1), 10);
  EXPECT_EQ(p.backoff(2), 60);
  EXPECT_EQ(p.backoff(3), 0);
  p.backoff_schedule.clear();
  EXPECT_EQ(p.backoff(1), 30);
}

} // namespace
} // namespace cmdbus
