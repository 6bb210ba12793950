#pragma once

// Recurring slots of a schedule: 5-field cron expressions evaluated in an
// IANA time zone, and fixed intervals (docs/scheduling.md, "Recurring
// schedules"). No CAF and no libpq here.

#include <bitset>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "cmdbus/model/types.hpp"

namespace cmdbus {

/// An invalid cron expression, time zone or interval; what() says which
/// field and why.
class cron_error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// A parsed 5-field cron expression: minute hour day-of-month month
/// day-of-week. Each field is `*`, a number, a range `a-b`, a step `*/n`,
/// `a-b/n` or `a/n` (from a to the field's end), or a comma-separated list
/// of those; months and weekdays may be named (JAN..DEC, SUN..SAT, any
/// case); weekday 7 is Sunday like 0. When both day fields are restricted
/// (neither starts with `*`), a day matches when either matches; otherwise
/// both must.
class cron_expr {
public:
  /// Parses `text`; throws `cron_error` naming the field and the reason.
  static cron_expr parse(std::string_view text);

  /// Returns the expression as given, whitespace normalised.
  const std::string& text() const noexcept {
    return text_;
  }

  /// Returns whether the local date and time match (month 1..12, day
  /// 1..31, weekday 0..6 with 0 Sunday, hour 0..23, minute 0..59).
  bool matches(int month, int day, int weekday, int hour, int minute) const;

  /// Returns whether the date matches both day fields under the rule above.
  bool day_matches(int month, int day, int weekday) const;

  bool minute_ok(int m) const {
    return minutes_[static_cast<size_t>(m)];
  }
  bool hour_ok(int h) const {
    return hours_[static_cast<size_t>(h)];
  }
  bool month_ok(int m) const {
    return months_[static_cast<size_t>(m)];
  }

private:
  std::string text_;
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;
  std::bitset<13> months_;
  std::bitset<7> weekdays_;
  bool days_restricted_ = false;
  bool weekdays_restricted_ = false;
};

/// When a schedule fires: a cron expression in a time zone, or a fixed
/// interval from an anchor.
///
/// DST rule for cron schedules: a local slot that does not exist (spring
/// forward) fires once, at the first instant after the gap; a local slot
/// that exists twice (fall back) fires once, at its first occurrence.
/// Slots are instants: local slots that map to the same instant (several
/// slots inside one gap) are one slot.
class schedule_timing {
public:
  /// A cron schedule; throws `cron_error` for an invalid expression or an
  /// unknown zone (IANA name, e.g. "Europe/Berlin"; "UTC").
  static schedule_timing cron(std::string_view expr, std::string_view zone);

  /// An interval schedule: slots at anchor + k * every (k integer); throws
  /// `cron_error` for an interval under 1 ms.
  static schedule_timing interval(std::chrono::milliseconds every,
                                  timestamp anchor);

  /// Returns the first slot strictly after `t`. Throws `cron_error` for a
  /// cron expression that matches no date within 30 years of `t` (e.g.
  /// "0 0 30 2 *").
  timestamp next_after(timestamp t) const;

  /// Returns the last slot at or before `t` that is not before `from` (a
  /// slot), or `from` itself when the next slot after `from` is later than
  /// `t`: the newest of the slots from..t.
  timestamp newest_until(timestamp from, timestamp t) const;

  bool is_cron() const noexcept {
    return cron_.has_value();
  }
  /// The cron expression (cron schedules).
  const cron_expr& expr() const {
    return *cron_;
  }
  /// The zone's name (cron schedules).
  const std::string& zone_name() const noexcept {
    return zone_name_;
  }
  /// The interval (interval schedules).
  std::chrono::milliseconds every() const noexcept {
    return every_;
  }
  /// The anchor (interval schedules).
  timestamp anchor() const noexcept {
    return anchor_;
  }

private:
  std::optional<cron_expr> cron_;
  std::string zone_name_;
  const void* zone_ = nullptr; // const date::time_zone*
  std::chrono::milliseconds every_{0};
  timestamp anchor_{};
};

/// Formats an interval for people: "1h30m", "15s", "250ms".
std::string format_schedule_interval(std::chrono::milliseconds d);

} // namespace cmdbus
