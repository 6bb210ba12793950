// Cron expressions and schedule slots (model/cron.hpp): parsing and its
// errors, the day rule, steps, lists and names, month ends and leap years,
// the DST rule at both of Europe/Berlin's 2026 transitions, intervals.

#include <gtest/gtest.h>

#include <string>

#include "cmdbus/model/cron.hpp"

namespace cmdbus {
namespace {

timestamp at(const char* iso) {
  auto t = parse_timestamp(iso);
  EXPECT_TRUE(t.has_value()) << iso;
  return t.value_or(timestamp{});
}

std::string next(const schedule_timing& s, const char* iso) {
  return format_timestamp(s.next_after(at(iso)));
}

std::string cron_error_of(const char* expr, const char* zone = "UTC") {
  try {
    schedule_timing::cron(expr, zone);
  } catch (const cron_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Cron, SpringForwardSlotInTheGapFiresOnceAtTheEndOfTheGap) {
  // 2026-03-29: 02:00 CET -> 03:00 CEST (01:00Z); 02:30 does not exist.
  auto s = schedule_timing::cron("30 2 * * *", "Europe/Berlin");
  EXPECT_EQ(next(s, "2026-03-28T00:00:00Z"), "2026-03-28T01:30:00.000000Z");
  EXPECT_EQ(next(s, "2026-03-28T12:00:00Z"), "2026-03-29T01:00:00.000000Z");
  EXPECT_EQ(next(s, "2026-03-29T01:00:00Z"), "2026-03-30T00:30:00.000000Z");
}

TEST(Cron, SlotsInsideOneGapAreOneSlot) {
  // 02:00, 02:15, 02:30, 02:45 and 03:00 local are all 01:00Z.
  auto s = schedule_timing::cron("*/15 * * * *", "Europe/Berlin");
  EXPECT_EQ(next(s, "2026-03-29T00:50:00Z"), "2026-03-29T01:00:00.000000Z");
  EXPECT_EQ(next(s, "2026-03-29T01:00:00Z"), "2026-03-29T01:15:00.000000Z");
}

TEST(Cron, FallBackSlotFiresOnceAtItsFirstOccurrence) {
  // 2026-10-25: 03:00 CEST -> 02:00 CET (01:00Z); 02:30 exists twice
  // (00:30Z and 01:30Z).
  auto s = schedule_timing::cron("30 2 * * *", "Europe/Berlin");
  EXPECT_EQ(next(s, "2026-10-24T12:00:00Z"), "2026-10-25T00:30:00.000000Z");
  EXPECT_EQ(next(s, "2026-10-25T00:30:00Z"), "2026-10-26T01:30:00.000000Z");
  // From inside the repeated hour (its second pass): not again that day.
  EXPECT_EQ(next(s, "2026-10-25T01:10:00Z"), "2026-10-26T01:30:00.000000Z");
  auto hourly = schedule_timing::cron("0 * * * *", "Europe/Berlin");
  EXPECT_EQ(next(hourly, "2026-10-24T23:30:00Z"),
            "2026-10-25T00:00:00.000000Z");
  // 02:00 CET (01:00Z) is the second occurrence of 02:00: skipped.
  EXPECT_EQ(next(hourly, "2026-10-25T00:00:00Z"),
            "2026-10-25T02:00:00.000000Z");
}

TEST(Cron, StepsListsRangesAndNames) {
  auto s = schedule_timing::cron("0 9-17/4 * JAN,jul MON-FRI", "UTC");
  // 2026-01-01 is a Thursday.
  EXPECT_EQ(next(s, "2026-01-01T00:00:00Z"), "2026-01-01T09:00:00.000000Z");
  EXPECT_EQ(next(s, "2026-01-01T09:00:00Z"), "2026-01-01T13:00:00.000000Z");
  EXPECT_EQ(next(s, "2026-01-01T13:00:00Z"), "2026-01-01T17:00:00.000000Z");
  // Friday 30 January 17:00, then Wednesday 1 July.
  EXPECT_EQ(next(s, "2026-01-30T17:00:00Z"), "2026-07-01T09:00:00.000000Z");
  auto list = schedule_timing::cron("5,10,50-52 * * * *", "UTC");
  EXPECT_EQ(next(list, "2026-01-01T00:10:00Z"), "2026-01-01T00:50:00.000000Z");
  EXPECT_EQ(next(list, "2026-01-01T00:51:00Z"), "2026-01-01T00:52:00.000000Z");
  EXPECT_EQ(next(list, "2026-01-01T00:52:00Z"), "2026-01-01T01:05:00.000000Z");
  auto from = schedule_timing::cron("40/10 * * * *", "UTC");
  EXPECT_EQ(next(from, "2026-01-01T00:00:00Z"), "2026-01-01T00:40:00.000000Z");
  EXPECT_EQ(next(from, "2026-01-01T00:50:00Z"), "2026-01-01T01:40:00.000000Z");
  // Weekday 7 is Sunday; 2026-02-02 is a Monday.
  auto sunday = schedule_timing::cron("0 0 * * 7", "UTC");
  EXPECT_EQ(next(sunday, "2026-02-02T00:00:00Z"),
            "2026-02-08T00:00:00.000000Z");
  EXPECT_EQ(schedule_timing::cron("  0   0 * *  sun ", "UTC").expr().text(),
            "0 0 * * sun");
}

TEST(Cron, RestrictedDayFieldsMatchEither) {
  auto s = schedule_timing::cron("0 0 1 * MON", "UTC");
  // 2026-02-01 is a Sunday: Monday 2 February, then Sunday 1 March (the
  // first of the month) before Monday 2 March.
  EXPECT_EQ(next(s, "2026-02-01T00:00:00Z"), "2026-02-02T00:00:00.000000Z");
  EXPECT_EQ(next(s, "2026-02-23T00:00:00Z"), "2026-03-01T00:00:00.000000Z");
  EXPECT_EQ(next(s, "2026-03-01T00:00:00Z"), "2026-03-02T00:00:00.000000Z");
  // With one day field unrestricted, both must match.
  auto first = schedule_timing::cron("0 0 1 * *", "UTC");
  EXPECT_EQ(next(first, "2026-02-01T00:00:00Z"), "2026-03-01T00:00:00.000000Z");
  auto mondays = schedule_timing::cron("0 0 */1 * MON", "UTC");
  EXPECT_EQ(next(mondays, "2026-02-02T00:00:00Z"),
            "2026-02-09T00:00:00.000000Z");
}

TEST(Cron, MonthEndsAndLeapYears) {
  auto s31 = schedule_timing::cron("0 0 31 * *", "UTC");
  EXPECT_EQ(next(s31, "2026-01-31T00:00:00Z"), "2026-03-31T00:00:00.000000Z");
  EXPECT_EQ(next(s31, "2026-03-31T00:00:00Z"), "2026-05-31T00:00:00.000000Z");
  auto leap = schedule_timing::cron("0 12 29 2 *", "UTC");
  EXPECT_EQ(next(leap, "2026-03-01T00:00:00Z"), "2028-02-29T12:00:00.000000Z");
  EXPECT_EQ(next(leap, "2028-02-29T12:00:00Z"), "2032-02-29T12:00:00.000000Z");
  auto eoy = schedule_timing::cron("59 23 * * *", "UTC");
  EXPECT_EQ(next(eoy, "2026-12-31T23:58:30Z"), "2026-12-31T23:59:00.000000Z");
  EXPECT_EQ(next(eoy, "2026-12-31T23:59:00Z"), "2027-01-01T23:59:00.000000Z");
  // Sub-minute times move on to the next whole minute.
  auto every = schedule_timing::cron("* * * * *", "UTC");
  EXPECT_EQ(next(every, "2026-02-28T23:59:59.5Z"),
            "2026-03-01T00:00:00.000000Z");
  EXPECT_EQ(next(every, "2028-02-28T23:59:00Z"), "2028-02-29T00:00:00.000000Z");
}

TEST(Cron, InvalidExpressionsSayWhy) {
  EXPECT_EQ(cron_error_of("* * * *"),
            "a cron expression has 5 fields (minute hour day-of-month month "
            "day-of-week), '* * * *' has 4");
  EXPECT_EQ(cron_error_of("60 * * * *"),
            "cron field minute '60': 60 is out of range 0-59");
  EXPECT_EQ(cron_error_of("* 24 * * *"),
            "cron field hour '24': 24 is out of range 0-23");
  EXPECT_EQ(cron_error_of("* * 0 * *"),
            "cron field day-of-month '0': 0 is out of range 1-31");
  EXPECT_EQ(cron_error_of("* * * FOO *"),
            "cron field month 'FOO': 'FOO' is not a number or a name");
  EXPECT_EQ(cron_error_of("* * * * 8"),
            "cron field day-of-week '8': 8 is out of range 0-7");
  EXPECT_EQ(cron_error_of("*/0 * * * *"),
            "cron field minute '*/0': the step must be at least 1");
  EXPECT_EQ(cron_error_of("5-1 * * * *"),
            "cron field minute '5-1': the range ends before it starts");
  EXPECT_EQ(cron_error_of("1,,2 * * * *"),
            "cron field minute '1,,2': an empty list element");
  EXPECT_EQ(cron_error_of("a * * * *"),
            "cron field minute 'a': 'a' is not a number");
  EXPECT_EQ(cron_error_of("*/x * * * *"),
            "cron field minute '*/x': the step 'x' is not a number");
  EXPECT_EQ(cron_error_of("0 0 * * *", "Mars/Olympus"),
            "unknown time zone 'Mars/Olympus' (an IANA name such as "
            "Europe/Berlin, or UTC)");
  auto never = schedule_timing::cron("0 0 30 2 *", "UTC");
  try {
    never.next_after(at("2026-01-01T00:00:00Z"));
    ADD_FAILURE() << "30 February matched";
  } catch (const cron_error& e) {
    EXPECT_EQ(std::string{e.what()},
              "the cron expression '0 0 30 2 *' matches no time within 30 "
              "years");
  }
}

TEST(Cron, NewestSlotUntil) {
  auto s = schedule_timing::cron("0 * * * *", "UTC");
  EXPECT_EQ(format_timestamp(s.newest_until(at("2026-01-01T00:00:00Z"),
                                            at("2026-01-01T05:30:00Z"))),
            "2026-01-01T05:00:00.000000Z");
  EXPECT_EQ(format_timestamp(s.newest_until(at("2026-01-01T00:00:00Z"),
                                            at("2026-01-01T00:30:00Z"))),
            "2026-01-01T00:00:00.000000Z");
}

TEST(Interval, SlotsAtAnchorPlusMultiples) {
  auto anchor = at("2026-01-01T00:00:00Z");
  auto s = schedule_timing::interval(std::chrono::seconds{90}, anchor);
  EXPECT_EQ(next(s, "2026-01-01T00:00:00Z"), "2026-01-01T00:01:30.000000Z");
  EXPECT_EQ(next(s, "2026-01-01T00:01:40Z"), "2026-01-01T00:03:00.000000Z");
  EXPECT_EQ(next(s, "2025-12-31T23:59:50Z"), "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(next(s, "2025-12-31T23:58:00Z"), "2025-12-31T23:58:30.000000Z");
  EXPECT_EQ(format_timestamp(s.newest_until(at("2026-01-01T00:01:30Z"),
                                            at("2026-01-01T00:16:40Z"))),
            "2026-01-01T00:16:30.000000Z");
  EXPECT_THROW(schedule_timing::interval(std::chrono::milliseconds{0}, anchor),
               cron_error);
  EXPECT_EQ(format_schedule_interval(std::chrono::seconds{90}), "1m30s");
  EXPECT_EQ(format_schedule_interval(std::chrono::milliseconds{250}), "250ms");
  EXPECT_EQ(format_schedule_interval(std::chrono::hours{26}), "1d2h");
}

} // namespace
} // namespace cmdbus
