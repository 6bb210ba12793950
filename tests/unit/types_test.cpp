#include "cmdbus/model/types.hpp"

#include <gtest/gtest.h>

using namespace cmdbus;
using namespace std::chrono;

namespace {

/// Microseconds since the epoch of `text`, or -1 when it does not parse.
int64_t micros(std::string_view text) {
  auto t = parse_timestamp(text);
  return t ? t->time_since_epoch().count() : -1;
}

// 2026-11-26 00:23:12 UTC.
constexpr int64_t base = 1795652592LL * 1000000;

// -- timestamps ---------------------------------------------------------------

TEST(timestamp, parses_postgres_output_in_utc) {
  EXPECT_EQ(micros("2026-11-26 00:23:12+00"), base);
  EXPECT_EQ(micros("2026-11-26 00:23:12.123456+00"), base + 123456);
  EXPECT_EQ(micros("1970-01-01 00:00:00+00"), 0);
}

TEST(timestamp, parses_fractions_of_one_to_six_digits) {
  EXPECT_EQ(micros("2026-11-26 00:23:12.1+00"), base + 100000);
  EXPECT_EQ(micros("2026-11-26 00:23:12.12+00"), base + 120000);
  EXPECT_EQ(micros("2026-11-26 00:23:12.123+00"), base + 123000);
  EXPECT_EQ(micros("2026-11-26 00:23:12.1234+00"), base + 123400);
  EXPECT_EQ(micros("2026-11-26 00:23:12.12345+00"), base + 123450);
  EXPECT_EQ(micros("2026-11-26 00:23:12.000001+00"), base + 1);
}

TEST(timestamp, applies_offsets) {
  EXPECT_EQ(micros("2026-11-26 05:53:12+05:30"), base);
  EXPECT_EQ(micros("2026-11-26 05:53:12+0530"), base);
  EXPECT_EQ(micros("2026-11-26 01:23:12+01"), base);
  EXPECT_EQ(micros("2026-11-25 14:23:12-10"), base);
  EXPECT_EQ(micros("2026-11-25 20:53:12.5-03:30"), base + 500000);
  // PostgreSQL prints seconds in historical offsets (e.g. LMT).
  EXPECT_EQ(micros("2026-11-26 00:24:00+00:00:48"), base);
  // Crossing a year and a leap day.
  EXPECT_EQ(micros("2024-03-01 01:00:00+02"), micros("2024-02-29 23:00:00Z"));
  EXPECT_EQ(micros("2026-01-01 00:30:00+01"), micros("2025-12-31T23:30:00Z"));
}

TEST(timestamp, parses_iso_8601) {
  EXPECT_EQ(micros("2026-11-26T00:23:12Z"), base);
  EXPECT_EQ(micros("2026-11-26T00:23:12.123456Z"), base + 123456);
  EXPECT_EQ(micros("2026-11-26T02:23:12.5+02:00"), base + 500000);
}

TEST(timestamp, handles_times_before_1970) {
  EXPECT_EQ(micros("1969-12-31 23:59:59.999999+00"), -1);
  EXPECT_EQ(micros("1900-01-01 00:00:00+00"), -2208988800LL * 1000000);
  auto t = parse_timestamp("1969-12-31 23:59:59.5+00");
  ASSERT_TRUE(t);
  EXPECT_EQ(format_timestamp(*t), "1969-12-31T23:59:59.500000Z");
}

TEST(timestamp, rejects_invalid_input) {
  const char* bad[] = {
      "",
      "2026-11-26",
      "2026-11-26 00:23:12",            // no offset
      "2026-11-26 00:23+00",            // no seconds
      "2026-11-26 00:23:12.+00",        // empty fraction
      "2026-11-26 00:23:12.1234567+00", // 7 fraction digits
      "2026-13-01 00:00:00+00",
      "2026-00-01 00:00:00+00",
      "2026-02-29 00:00:00+00", // not a leap year
      "2026-04-31 00:00:00+00",
      "2026-11-00 00:00:00+00",
      "2026-11-26 24:00:00+00",
      "2026-11-26 23:60:00+00",
      "2026-11-26 23:59:60+00",
      "2026-11-26 00:23:12+24",
      "2026-11-26 00:23:12+05:60",
      "2026-11-26 00:23:12+5",
      "2026-11-26 00:23:12+05:3",
      "2026-11-26 00:23:12 +00",
      "2026-11-26 00:23:12+00 BC",
      "2026-11-26 00:23:12+00x",
      "2026-11-26x00:23:12+00",
      "26-11-26 00:23:12+00",
      "20261126 002312Z",
      "infinity",
      "-infinity",
      "2026-1a-26 00:23:12+00",
      " 2026-11-26 00:23:12+00",
  };
  for (auto text : bad)
    EXPECT_FALSE(parse_timestamp(text)) << text;
}

TEST(timestamp, formats_iso_8601_utc_with_microseconds) {
  timestamp t{microseconds{base + 123456}};
  EXPECT_EQ(format_timestamp(t), "2026-11-26T00:23:12.123456Z");
  EXPECT_EQ(format_timestamp(timestamp{}), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(format_timestamp(timestamp{microseconds{base + 7}}),
            "2026-11-26T00:23:12.000007Z");
}

TEST(timestamp, round_trips) {
  const char* texts[] = {
      "2026-11-26T00:23:12.123456Z", "2000-02-29T12:00:00.000000Z",
      "1999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00.000000Z",
      "9999-12-31T23:59:59.999999Z",
  };
  for (auto text : texts) {
    auto t = parse_timestamp(text);
    ASSERT_TRUE(t) << text;
    EXPECT_EQ(format_timestamp(*t), text);
  }
}

// -- enumerations -------------------------------------------------------------

TEST(enums, command_status_round_trips) {
  const std::pair<command_status, const char*> all[] = {
      {command_status::pending, "PENDING"},
      {command_status::in_progress, "IN_PROGRESS"},
      {command_status::completed, "COMPLETED"},
      {command_status::failed, "FAILED"},
      {command_status::canceled, "CANCELED"},
      {command_status::in_troubleshooting_queue, "IN_TROUBLESHOOTING_QUEUE"},
  };
  for (auto& [value, name] : all) {
    EXPECT_EQ(to_string(value), name);
    EXPECT_EQ(parse_command_status(name), value);
  }
  EXPECT_TRUE(is_terminal(command_status::completed));
  EXPECT_TRUE(is_terminal(command_status::failed));
  EXPECT_TRUE(is_terminal(command_status::canceled));
  EXPECT_FALSE(is_terminal(command_status::pending));
  EXPECT_FALSE(is_terminal(command_status::in_progress));
  EXPECT_FALSE(is_terminal(command_status::in_troubleshooting_queue));
}

TEST(enums, reply_outcome_round_trips) {
  EXPECT_EQ(to_string(reply_outcome::success), "SUCCESS");
  EXPECT_EQ(to_string(reply_outcome::failed), "FAILED");
  EXPECT_EQ(to_string(reply_outcome::canceled), "CANCELED");
  for (auto x :
       {reply_outcome::success, reply_outcome::failed, reply_outcome::canceled})
    EXPECT_EQ(parse_reply_outcome(to_string(x)), x);
}

TEST(enums, batch_status_round_trips) {
  EXPECT_EQ(to_string(batch_status::completed_with_failures),
            "COMPLETED_WITH_FAILURES");
  for (auto x :
       {batch_status::pending, batch_status::in_progress,
        batch_status::completed, batch_status::completed_with_failures})
    EXPECT_EQ(parse_batch_status(to_string(x)), x);
}

TEST(enums, reject_lower_case_and_unknown_strings) {
  EXPECT_FALSE(parse_command_status("pending"));
  EXPECT_FALSE(parse_command_status("Pending"));
  EXPECT_FALSE(parse_command_status("WAITING"));
  EXPECT_FALSE(parse_command_status(""));
  EXPECT_FALSE(parse_command_status("PENDING "));
  EXPECT_FALSE(parse_reply_outcome("success"));
  EXPECT_FALSE(parse_reply_outcome("CANCELLED"));
  EXPECT_FALSE(parse_reply_outcome("ERROR"));
  EXPECT_FALSE(parse_batch_status("completed"));
  EXPECT_FALSE(parse_batch_status("FAILED"));
}

// -- retry policy (the reference's defaults: 3 attempts, 10/60/300 s) ---------

TEST(retry_policy, defaults_match_the_reference) {
  retry_policy p;
  EXPECT_EQ(p.max_attempts, 3);
  EXPECT_EQ(p.backoff_schedule, (std::vector<int>{10, 60, 300}));
  EXPECT_TRUE(p.should_retry(1));
  EXPECT_TRUE(p.should_retry(2));
  EXPECT_FALSE(p.should_retry(3));
  EXPECT_EQ(p.backoff(1), 10);
  EXPECT_EQ(p.backoff(2), 60);
  EXPECT_EQ(p.backoff(3), 0); // exhausted: the 300 is never used with max 3
  EXPECT_EQ(p.backoff(4), 0);
}

TEST(retry_policy, clamps_to_the_last_entry) {
  retry_policy p{10, {1, 2, 5}};
  EXPECT_EQ(p.backoff(1), 1);
  EXPECT_EQ(p.backoff(2), 2);
  EXPECT_EQ(p.backoff(3), 5);
  EXPECT_EQ(p.backoff(4), 5);
  EXPECT_EQ(p.backoff(9), 5);
  EXPECT_EQ(p.backoff(10), 0);
}

TEST(retry_policy, attempt_zero_or_less_uses_the_first_entry) {
  retry_policy p{3, {7, 8}};
  EXPECT_EQ(p.backoff(0), 7);
  EXPECT_EQ(p.backoff(-5), 7);
}

TEST(retry_policy, empty_schedule_gives_30_seconds) {
  retry_policy p{5, {}};
  EXPECT_EQ(p.backoff(0), 30);
  EXPECT_EQ(p.backoff(1), 30);
  EXPECT_EQ(p.backoff(4), 30);
  EXPECT_EQ(p.backoff(5), 0);
}

TEST(retry_policy, exhaustion_wins_over_everything) {
  retry_policy p{1, {10}};
  EXPECT_FALSE(p.should_retry(1));
  EXPECT_EQ(p.backoff(1), 0);
  EXPECT_EQ(p.backoff(0), 10);
  retry_policy none{0, {10}};
  EXPECT_EQ(none.backoff(0), 0);
  EXPECT_EQ(none.backoff(-1), 10);
}

} // namespace
