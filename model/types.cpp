#include "cmdbus/model/types.hpp"

#include "cmdbus/model/backoff.hpp"

#include <array>
#include <cstdio>
#include <utility>

namespace cmdbus {

// -- timestamps ---------------------------------------------------------------

namespace {

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// days_from_civil; exact for every int64 year we can reach).
constexpr int64_t days_from_civil(int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

struct civil_date {
  int64_t year;
  unsigned month;
  unsigned day;
};

/// Inverse of `days_from_civil`.
constexpr civil_date civil_from_days(int64_t z) noexcept {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t y = static_cast<int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  return {y + (m <= 2 ? 1 : 0), m, d};
}

static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(days_from_civil(2000, 3, 1) == 11017);
static_assert(civil_from_days(11017).month == 3);

constexpr bool is_leap(int64_t y) noexcept {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

constexpr unsigned days_in_month(int64_t y, unsigned m) noexcept {
  constexpr std::array<unsigned, 12> days{31, 28, 31, 30, 31, 30,
                                          31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/// A cursor over the text being parsed.
class scanner {
public:
  explicit scanner(std::string_view text) : text_(text) {
    // nop
  }

  bool at_end() const noexcept {
    return pos_ == text_.size();
  }

  /// Returns the next character, or '\0' at the end.
  char peek() const noexcept {
    return at_end() ? '\0' : text_[pos_];
  }

  /// Consumes `c` if it comes next.
  bool consume(char c) noexcept {
    if (peek() != c || at_end())
      return false;
    ++pos_;
    return true;
  }

  /// Reads exactly `n` decimal digits into `out`.
  bool digits(size_t n, unsigned& out) noexcept {
    if (text_.size() - pos_ < n)
      return false;
    unsigned x = 0;
    for (size_t i = 0; i < n; ++i) {
      char c = text_[pos_ + i];
      if (c < '0' || c > '9')
        return false;
      x = x * 10 + static_cast<unsigned>(c - '0');
    }
    pos_ += n;
    out = x;
    return true;
  }

  /// Returns whether a decimal digit comes next.
  bool digit_next() const noexcept {
    return !at_end() && text_[pos_] >= '0' && text_[pos_] <= '9';
  }

private:
  std::string_view text_;
  size_t pos_ = 0;
};

/// Parses the UTC offset: "Z", "+HH", "+HHMM", "+HH:MM" or "+HH:MM:SS"
/// (PostgreSQL prints seconds for historical zones). Returns seconds east
/// of UTC.
std::optional<int64_t> parse_offset(scanner& in) noexcept {
  if (in.consume('Z'))
    return 0;
  int64_t sign;
  if (in.consume('+'))
    sign = 1;
  else if (in.consume('-'))
    sign = -1;
  else
    return std::nullopt;
  unsigned hh = 0;
  unsigned mm = 0;
  unsigned ss = 0;
  if (!in.digits(2, hh) || hh > 23)
    return std::nullopt;
  if (in.consume(':')) {
    if (!in.digits(2, mm))
      return std::nullopt;
    if (in.consume(':') && !in.digits(2, ss))
      return std::nullopt;
  } else if (in.digit_next() && !in.digits(2, mm)) {
    return std::nullopt;
  }
  if (mm > 59 || ss > 59)
    return std::nullopt;
  return sign * (static_cast<int64_t>(hh) * 3600 + mm * 60 + ss);
}

} // namespace

std::optional<timestamp> parse_timestamp(std::string_view text) noexcept {
  scanner in{text};
  unsigned year = 0;
  unsigned month = 0;
  unsigned day = 0;
  unsigned hour = 0;
  unsigned minute = 0;
  unsigned second = 0;
  if (!in.digits(4, year) || !in.consume('-') || !in.digits(2, month)
      || !in.consume('-') || !in.digits(2, day))
    return std::nullopt;
  if (!in.consume(' ') && !in.consume('T'))
    return std::nullopt;
  if (!in.digits(2, hour) || !in.consume(':') || !in.digits(2, minute)
      || !in.consume(':') || !in.digits(2, second))
    return std::nullopt;
  int64_t micros = 0;
  if (in.consume('.')) {
    size_t n = 0;
    while (in.digit_next()) {
      unsigned d = 0;
      if (++n > 6)
        return std::nullopt;
      in.digits(1, d);
      micros = micros * 10 + d;
    }
    if (n == 0)
      return std::nullopt;
    for (; n < 6; ++n)
      micros *= 10;
  }
  auto offset = parse_offset(in);
  if (!offset || !in.at_end())
    return std::nullopt;
  if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month)
      || hour > 23 || minute > 59 || second > 59)
    return std::nullopt;
  int64_t secs = days_from_civil(year, month, day) * 86400
                 + static_cast<int64_t>(hour) * 3600 + minute * 60 + second
                 - *offset;
  return timestamp{std::chrono::microseconds{secs * 1000000 + micros}};
}

timestamp not_before_in(std::chrono::microseconds delay) {
  return std::chrono::time_point_cast<std::chrono::microseconds>(
           std::chrono::system_clock::now())
         + delay;
}

std::string format_timestamp(timestamp t) {
  constexpr int64_t us_per_day = 86400LL * 1000000;
  auto us = t.time_since_epoch().count();
  // Floor division, so that times before 1970 format correctly.
  auto days = us / us_per_day;
  auto rem = us % us_per_day;
  if (rem < 0) {
    rem += us_per_day;
    --days;
  }
  auto date = civil_from_days(days);
  auto secs = rem / 1000000;
  auto micros = rem % 1000000;
  char buf[64];
  std::snprintf(
    buf, sizeof(buf), "%04lld-%02u-%02uT%02lld:%02lld:%02lld.%06lldZ",
    static_cast<long long>(date.year), date.month, date.day,
    static_cast<long long>(secs / 3600), static_cast<long long>(secs / 60 % 60),
    static_cast<long long>(secs % 60), static_cast<long long>(micros));
  return buf;
}

// -- enumerations -------------------------------------------------------------

namespace {

template <class Enum, size_t N>
using name_table = std::array<std::pair<Enum, std::string_view>, N>;

constexpr name_table<command_status, 6> command_status_names{{
  {command_status::pending, "PENDING"},
  {command_status::in_progress, "IN_PROGRESS"},
  {command_status::completed, "COMPLETED"},
  {command_status::failed, "FAILED"},
  {command_status::canceled, "CANCELED"},
  {command_status::in_troubleshooting_queue, "IN_TROUBLESHOOTING_QUEUE"},
}};

constexpr name_table<reply_outcome, 3> reply_outcome_names{{
  {reply_outcome::success, "SUCCESS"},
  {reply_outcome::failed, "FAILED"},
  {reply_outcome::canceled, "CANCELED"},
}};

constexpr name_table<batch_status, 4> batch_status_names{{
  {batch_status::pending, "PENDING"},
  {batch_status::in_progress, "IN_PROGRESS"},
  {batch_status::completed, "COMPLETED"},
  {batch_status::completed_with_failures, "COMPLETED_WITH_FAILURES"},
}};

template <class Enum, size_t N>
std::string_view name_of(const name_table<Enum, N>& table, Enum x) noexcept {
  for (auto& [value, name] : table)
    if (value == x)
      return name;
  return "UNKNOWN";
}

template <class Enum, size_t N>
std::optional<Enum>
value_of(const name_table<Enum, N>& table, std::string_view x) noexcept {
  for (auto& [value, name] : table)
    if (name == x)
      return value;
  return std::nullopt;
}

} // namespace

std::string_view to_string(command_status x) noexcept {
  return name_of(command_status_names, x);
}

std::optional<command_status>
parse_command_status(std::string_view x) noexcept {
  return value_of(command_status_names, x);
}

bool is_terminal(command_status x) noexcept {
  return x == command_status::completed || x == command_status::failed
         || x == command_status::canceled;
}

std::string_view to_string(reply_outcome x) noexcept {
  return name_of(reply_outcome_names, x);
}

std::optional<reply_outcome> parse_reply_outcome(std::string_view x) noexcept {
  return value_of(reply_outcome_names, x);
}

std::string_view to_string(batch_status x) noexcept {
  return name_of(batch_status_names, x);
}

std::optional<batch_status> parse_batch_status(std::string_view x) noexcept {
  return value_of(batch_status_names, x);
}

// -- records ------------------------------------------------------------------

bool operator==(const command& a, const command& b) noexcept {
  return a.domain == b.domain && a.command_type == b.command_type
         && a.command_id == b.command_id && a.data == b.data
         && a.correlation_id == b.correlation_id && a.reply_to == b.reply_to
         && a.priority == b.priority;
}

bool operator!=(const command& a, const command& b) noexcept {
  return !(a == b);
}

bool operator==(const reply& a, const reply& b) noexcept {
  return a.command_id == b.command_id && a.correlation_id == b.correlation_id
         && a.outcome == b.outcome && a.result == b.result
         && a.error_code == b.error_code && a.error_message == b.error_message
         && a.reason == b.reason;
}

bool operator!=(const reply& a, const reply& b) noexcept {
  return !(a == b);
}

// -- retry policy -------------------------------------------------------------

int retry_policy::backoff(int attempt) const noexcept {
  if (attempt >= max_attempts)
    return 0;
  return backoff::from_schedule(backoff_schedule, attempt, 30);
}

} // namespace cmdbus
