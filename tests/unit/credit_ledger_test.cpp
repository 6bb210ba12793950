// The credit bookkeeping of a domain supervisor (actors/worker/
// credit_ledger.hpp) without an actor: freed slots pay the debt of vanished
// remote pools before they become credits, releases respect the room the
// hold limit leaves, a vanished pool's slots come back from the pending
// credits first, and the invariant granted + held + pending - debt ==
// capacity holds through each step.

#include "cmdbus/actors/worker/credit_ledger.hpp"

#include <gtest/gtest.h>

using cmdbus::actors::credit_ledger;

TEST(CreditLedger, FreedSlotsBecomePendingAndGoOutWithinTheRoom) {
  credit_ledger c;
  c.start(4, 0); // capacity 4, all at the poller
  c.used(3);     // three commands read
  EXPECT_TRUE(c.balanced(3, 4));
  EXPECT_TRUE(c.freed(2)); // two finished
  EXPECT_EQ(c.pending(), 2);
  EXPECT_TRUE(c.balanced(1, 4));
  auto epoch = c.epoch();
  EXPECT_EQ(c.release(1), 1); // the hold limit leaves room for one
  EXPECT_TRUE(c.withheld());
  EXPECT_GT(c.epoch(), epoch);
  c.sent(1);
  EXPECT_EQ(c.granted(), 2);
  EXPECT_EQ(c.pending(), 1);
  EXPECT_TRUE(c.balanced(1, 4));
  EXPECT_EQ(c.release(10), 1);
  EXPECT_FALSE(c.withheld());
  c.sent(1);
  EXPECT_TRUE(c.balanced(1, 4));
}

TEST(CreditLedger, NoRoomReleasesNothing) {
  credit_ledger c;
  c.start(2, 0);
  c.used(2);
  c.freed(2);
  EXPECT_LE(c.release(0), 0);
  EXPECT_TRUE(c.withheld());
  EXPECT_EQ(c.pending(), 2);
  EXPECT_LE(c.release(-3), 0);
  EXPECT_EQ(c.pending(), 2);
}

TEST(CreditLedger, FreedSlotsPayTheDebtFirst) {
  credit_ledger c;
  c.start(6, 2); // a domain without local handlers: its share starts as debt
  EXPECT_TRUE(c.balanced(0, 4));
  c.used(3);
  EXPECT_FALSE(c.freed(2)); // all of it pays the debt
  EXPECT_EQ(c.debt(), 0);
  EXPECT_EQ(c.pending(), 0);
  EXPECT_TRUE(c.freed(1));
  EXPECT_EQ(c.pending(), 1);
  EXPECT_TRUE(c.balanced(0, 4));
}

TEST(CreditLedger, AVanishedPoolTakesItsIdleSlotsFromPendingAndOwesTheRest) {
  credit_ledger c;
  // Capacity 2 local + 3 remote; the poller holds 1, 2 run remotely, 2
  // freed and pending.
  c.start(5, 0);
  c.used(4);
  c.freed(2);
  EXPECT_TRUE(c.balanced(2, 5));
  // The pool (3 slots) vanishes with its 2 running commands: one slot it
  // no longer backs comes from pending.
  c.pool_dropped(3, 2);
  EXPECT_EQ(c.pending(), 1);
  EXPECT_EQ(c.debt(), 0);
  EXPECT_TRUE(c.balanced(0, 2));
  // A pool of 4 slots vanishes with nothing running while only 1 credit is
  // pending: 3 become debt, paid by later freed slots.
  credit_ledger d;
  d.start(6, 0);
  d.used(5);
  d.freed(1);
  d.pool_dropped(4, 0);
  EXPECT_EQ(d.pending(), 0);
  EXPECT_EQ(d.debt(), 3);
  EXPECT_TRUE(d.balanced(4, 2));
  EXPECT_FALSE(d.freed(3));
  EXPECT_EQ(d.debt(), 0);
}

TEST(CreditLedger, AShrinkingCapacityTakesPendingCreditsFirstThenOwes) {
  credit_ledger c;
  c.start(10, 0); // capacity 10
  c.used(6);
  EXPECT_TRUE(c.freed(2)); // 4 held, 2 pending
  EXPECT_TRUE(c.balanced(4, 10));
  c.shrunk(5); // capacity 5: the 2 pending and a debt of 3
  EXPECT_EQ(c.pending(), 0);
  EXPECT_EQ(c.debt(), 3);
  EXPECT_TRUE(c.balanced(4, 5));
  EXPECT_FALSE(c.freed(3)); // pays the debt
  EXPECT_EQ(c.debt(), 0);
  EXPECT_TRUE(c.balanced(1, 5));
  EXPECT_TRUE(c.freed(1));
  EXPECT_TRUE(c.balanced(0, 5));
  // Growing again: new pending credits.
  EXPECT_TRUE(c.freed(7));
  EXPECT_TRUE(c.balanced(0, 12));
}
