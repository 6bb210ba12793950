// Cron expressions and schedule slots (see cron.hpp). Time zones come from
// libdate-tz over the operating system's tzdata.

#include "cmdbus/model/cron.hpp"

#include <date/date.h>
#include <date/tz.h>

#include <cctype>
#include <vector>

namespace cmdbus {

namespace {

struct field_spec {
  const char* name;
  int lo;
  int hi;
  // Names of the values lo.. (months from 1, weekdays from 0), or null.
  const char* const* names;
};

constexpr const char* month_names[] = {"JAN", "FEB", "MAR", "APR",
                                       "MAY", "JUN", "JUL", "AUG",
                                       "SEP", "OCT", "NOV", "DEC"};
constexpr const char* weekday_names[] = {"SUN", "MON", "TUE", "WED",
                                         "THU", "FRI", "SAT"};

// Day-of-week takes 0..7 (7 is Sunday), folded to 0..6 after parsing.
const field_spec fields[] = {
  {"minute", 0, 59, nullptr},           {"hour", 0, 23, nullptr},
  {"day-of-month", 1, 31, nullptr},     {"month", 1, 12, month_names},
  {"day-of-week", 0, 7, weekday_names},
};

[[noreturn]] void fail(const field_spec& f, std::string_view part,
                       const std::string& why) {
  throw cron_error("cron field " + std::string{f.name} + " '"
                   + std::string{part} + "': " + why);
}

int parse_value(const field_spec& f, std::string_view part,
                std::string_view v) {
  if (v.empty())
    fail(f, part, "a value is missing");
  if (std::isdigit(static_cast<unsigned char>(v[0]))) {
    int n = 0;
    for (char c : v) {
      if (!std::isdigit(static_cast<unsigned char>(c)))
        fail(f, part, "'" + std::string{v} + "' is not a number");
      n = n * 10 + (c - '0');
      if (n > 1000)
        break;
    }
    if (n < f.lo || n > f.hi)
      fail(f, part,
           std::to_string(n) + " is out of range " + std::to_string(f.lo) + "-"
             + std::to_string(f.hi));
    return n;
  }
  if (f.names != nullptr && v.size() == 3) {
    std::string up;
    for (char c : v)
      up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    int count = f.names == month_names ? 12 : 7;
    int first = f.names == month_names ? 1 : 0;
    for (int i = 0; i < count; ++i)
      if (up == f.names[i])
        return first + i;
  }
  fail(f, part,
       "'" + std::string{v} + "' is not "
         + (f.names != nullptr ? "a number or a name" : "a number"));
}

// Parses one field into `bits` (index = value); returns whether it starts
// with '*' (unrestricted for the day rule).
template <size_t N>
bool parse_field(const field_spec& f, std::string_view text,
                 std::bitset<N>& bits) {
  size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    auto part = text.substr(start, comma == std::string_view::npos
                                     ? std::string_view::npos
                                     : comma - start);
    if (part.empty())
      fail(f, text, "an empty list element");
    auto slash = part.find('/');
    auto range = part.substr(0, slash);
    int step = 1;
    if (slash != std::string_view::npos) {
      auto s = part.substr(slash + 1);
      if (s.empty()
          || s.find_first_not_of("0123456789") != std::string_view::npos
          || s.size() > 4)
        fail(f, part, "the step '" + std::string{s} + "' is not a number");
      step = std::stoi(std::string{s});
      if (step < 1)
        fail(f, part, "the step must be at least 1");
    }
    int lo = 0;
    int hi = 0;
    if (range == "*") {
      lo = f.lo;
      hi = f.hi == 7 ? 6 : f.hi;
    } else if (auto dash = range.find('-'); dash != std::string_view::npos) {
      lo = parse_value(f, part, range.substr(0, dash));
      hi = parse_value(f, part, range.substr(dash + 1));
      if (hi < lo)
        fail(f, part, "the range ends before it starts");
    } else {
      lo = parse_value(f, part, range);
      hi = slash != std::string_view::npos ? (f.hi == 7 ? 6 : f.hi) : lo;
    }
    for (int v = lo; v <= hi; v += step)
      bits.set(static_cast<size_t>(f.hi == 7 && v == 7 ? 0 : v));
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  return !text.empty() && text[0] == '*';
}

const date::time_zone* zone_of(const void* z) {
  return static_cast<const date::time_zone*>(z);
}

} // namespace

cron_expr cron_expr::parse(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])))
      ++i;
    size_t j = i;
    while (j < text.size()
           && !std::isspace(static_cast<unsigned char>(text[j])))
      ++j;
    if (j > i)
      parts.push_back(text.substr(i, j - i));
    i = j;
  }
  if (parts.size() != 5)
    throw cron_error("a cron expression has 5 fields (minute hour "
                     "day-of-month month day-of-week), '"
                     + std::string{text} + "' has "
                     + std::to_string(parts.size()));
  cron_expr out;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k > 0)
      out.text_ += ' ';
    out.text_ += parts[k];
  }
  parse_field(fields[0], parts[0], out.minutes_);
  parse_field(fields[1], parts[1], out.hours_);
  out.days_restricted_ = !parse_field(fields[2], parts[2], out.days_);
  parse_field(fields[3], parts[3], out.months_);
  out.weekdays_restricted_ = !parse_field(fields[4], parts[4], out.weekdays_);
  return out;
}

bool cron_expr::day_matches(int month, int day, int weekday) const {
  if (!month_ok(month))
    return false;
  bool d = days_[static_cast<size_t>(day)];
  bool w = weekdays_[static_cast<size_t>(weekday)];
  if (days_restricted_ && weekdays_restricted_)
    return d || w;
  return d && w;
}

bool cron_expr::matches(int month, int day, int weekday, int hour,
                        int minute) const {
  return day_matches(month, day, weekday) && hour_ok(hour) && minute_ok(minute);
}

schedule_timing schedule_timing::cron(std::string_view expr,
                                      std::string_view zone) {
  schedule_timing out;
  out.cron_ = cron_expr::parse(expr);
  if (zone.empty())
    throw cron_error("a cron schedule needs a time zone (e.g. UTC)");
  try {
    out.zone_ = date::locate_zone(zone);
  } catch (const std::exception&) {
    throw cron_error("unknown time zone '" + std::string{zone}
                     + "' (an IANA name such as Europe/Berlin, or UTC)");
  }
  out.zone_name_ = std::string{zone};
  return out;
}

schedule_timing schedule_timing::interval(std::chrono::milliseconds every,
                                          timestamp anchor) {
  if (every < std::chrono::milliseconds{1})
    throw cron_error("a schedule's interval must be at least 1ms");
  schedule_timing out;
  out.every_ = every;
  out.anchor_ = anchor;
  return out;
}

timestamp schedule_timing::next_after(timestamp t) const {
  using namespace std::chrono;
  if (!cron_) {
    auto step = duration_cast<microseconds>(every_).count();
    auto since = (t - anchor_).count();
    // floor((t - anchor) / step) + 1, for t before the anchor too.
    auto k = since >= 0 ? since / step : -((-since + step - 1) / step);
    return anchor_ + microseconds{(k + 1) * step};
  }
  const auto* zone = zone_of(zone_);
  auto local = zone->to_local(floor<seconds>(t));
  auto cur = floor<minutes>(local) + minutes{1};
  auto limit = cur + date::years{30};
  const auto& c = *cron_;
  while (cur < limit) {
    auto day = floor<date::days>(cur);
    date::year_month_day ymd{day};
    auto month = static_cast<int>(static_cast<unsigned>(ymd.month()));
    if (!c.month_ok(month)) {
      auto next = date::year_month{ymd.year(), ymd.month()} + date::months{1};
      cur = date::local_days{next / 1};
      continue;
    }
    auto dom = static_cast<int>(static_cast<unsigned>(ymd.day()));
    auto wd = static_cast<int>(date::weekday{day}.c_encoding());
    if (!c.day_matches(month, dom, wd)) {
      cur = day + date::days{1};
      continue;
    }
    auto hour = static_cast<int>(duration_cast<hours>(cur - day).count());
    if (!c.hour_ok(hour)) {
      cur = day + hours{hour + 1};
      continue;
    }
    auto minute = static_cast<int>((cur - day - hours{hour}).count());
    if (!c.minute_ok(minute)) {
      cur += minutes{1};
      continue;
    }
    // A matching local minute: its instant under the DST rule.
    auto info = zone->get_info(cur);
    date::sys_seconds at;
    switch (info.result) {
      case date::local_info::unique:
        at = date::sys_seconds{(cur - info.first.offset).time_since_epoch()};
        break;
      case date::local_info::nonexistent:
        // The first instant after the gap: the transition itself.
        at = info.first.end;
        break;
      default: // ambiguous: the first occurrence
        at = date::sys_seconds{(cur - info.first.offset).time_since_epoch()};
        break;
    }
    auto slot = time_point_cast<microseconds>(at);
    if (slot > t)
      return timestamp{slot.time_since_epoch()};
    cur += minutes{1};
  }
  throw cron_error("the cron expression '" + c.text()
                   + "' matches no time within 30 years");
}

timestamp schedule_timing::newest_until(timestamp from, timestamp t) const {
  using namespace std::chrono;
  if (!cron_) {
    if (t < from)
      return from;
    auto step = duration_cast<microseconds>(every_).count();
    auto k = (t - anchor_).count() / step;
    auto last = anchor_ + microseconds{k * step};
    return last < from ? from : last;
  }
  auto last = from;
  for (;;) {
    auto next = next_after(last);
    if (next > t)
      return last;
    last = next;
  }
}

std::string format_schedule_interval(std::chrono::milliseconds d) {
  using namespace std::chrono;
  auto ms = d.count();
  if (ms <= 0)
    return "0s";
  std::string out;
  auto part = [&](int64_t unit, const char* name) {
    if (ms >= unit) {
      out += std::to_string(ms / unit) + name;
      ms %= unit;
    }
  };
  part(86400000, "d");
  part(3600000, "h");
  part(60000, "m");
  part(1000, "s");
  part(1, "ms");
  return out;
}

} // namespace cmdbus
