// The auto prefetch (actors/worker/prefetch_tuner.hpp) without an actor:
// the target follows slots x horizon / mean slot time within 0..limit, it
// is re-evaluated once per `slots` finished commands, small moves are
// ignored, and it follows handlers that become slow and quick again.

#include "cmdbus/actors/worker/prefetch_tuner.hpp"

#include <gtest/gtest.h>

using cmdbus::actors::prefetch_tuner;
using namespace std::chrono_literals;

TEST(PrefetchTuner, TargetIsWhatTheSlotsWorkOffWithinTheHorizon) {
  // 16 slots, 100 ms horizon.
  EXPECT_EQ(prefetch_tuner::target(16, 0ns), prefetch_tuner::limit);
  EXPECT_EQ(prefetch_tuner::target(16, 50us), prefetch_tuner::limit);
  EXPECT_EQ(prefetch_tuner::target(16, 10ms), 160);
  EXPECT_EQ(prefetch_tuner::target(16, 100ms), 16);
  EXPECT_EQ(prefetch_tuner::target(16, 1s), 1);
  EXPECT_EQ(prefetch_tuner::target(16, 2s), 0);
  EXPECT_EQ(prefetch_tuner::target(0, 1us), 0); // no local slots
  EXPECT_EQ(prefetch_tuner::target(4096, 1h), 0);
}

TEST(PrefetchTuner, ChangesOncePerSlotsCommandsAndOnlyByAQuarter) {
  prefetch_tuner t{4};
  EXPECT_EQ(t.current(), 0);
  // Three quick commands: not yet re-evaluated.
  for (int i = 0; i < 3; ++i)
    EXPECT_FALSE(t.finished(20us));
  auto first = t.finished(20us);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, prefetch_tuner::limit);
  EXPECT_EQ(t.current(), prefetch_tuner::limit);
  // The same pace again: no change.
  for (int i = 0; i < 8; ++i)
    EXPECT_FALSE(t.finished(20us));
  EXPECT_EQ(t.current(), prefetch_tuner::limit);
}

TEST(PrefetchTuner, FollowsHandlersThatSlowDownAndSpeedUp) {
  prefetch_tuner t{16};
  for (int i = 0; i < 16; ++i)
    t.finished(10us);
  EXPECT_EQ(t.current(), prefetch_tuner::limit);
  // The handlers take 2 s from now on: the weighted mean gets there within
  // a few evaluations, and the prefetch with it (nothing read ahead).
  for (int i = 0; i < 16 * 8; ++i)
    t.finished(2s);
  EXPECT_EQ(t.current(), 0);
  EXPECT_GT(t.mean(), 1s);
  // Quick again.
  for (int i = 0; i < 16 * 8; ++i)
    t.finished(10us);
  EXPECT_EQ(t.current(), prefetch_tuner::limit);
}

TEST(PrefetchTuner, SmallMovesAreIgnored) {
  prefetch_tuner t{16};
  for (int i = 0; i < 16; ++i)
    t.finished(10ms); // 160
  EXPECT_EQ(t.current(), 160);
  // 11 ms on average moves the target to about 145: less than a quarter.
  for (int i = 0; i < 16 * 8; ++i)
    t.finished(11ms);
  EXPECT_EQ(t.current(), 160);
  // 20 ms: 80, half.
  for (int i = 0; i < 16 * 8; ++i)
    t.finished(20ms);
  EXPECT_LE(t.current(), 100);
  EXPECT_GE(t.current(), 80);
}
