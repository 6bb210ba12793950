#include "cmdbus/config/values.hpp"

#include <cctype>
#include <charconv>

#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::config::detail {

using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

/// Describes what was found, for "expects X, got Y".
std::string got(const raw_value& v) {
  switch (v.shape) {
    case raw_value::form::bare: return db::printable(v.text);
    case raw_value::form::quoted: return "the string " + db::printable(v.text);
    case raw_value::form::list: return "a list";
  }
  return "a value";
}

std::string lower(std::string_view text) {
  std::string out{text};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// The largest magnitude of a duration: about 31 years.
constexpr long long max_duration_ms = 1'000'000'000'000LL;

} // namespace

// -- conversion --------------------------------------------------------------

std::string as_string(const raw_value& v) {
  if (v.shape != raw_value::form::quoted)
    // Never echo: this is the DSN, which may contain a password.
    throw value_error("expects a quoted string");
  return v.text;
}

std::vector<std::string> as_string_list(const raw_value& v) {
  if (v.shape == raw_value::form::quoted)
    return {v.text};
  if (v.shape != raw_value::form::list)
    throw value_error("expects a list of quoted strings such as "
                      "[\"payments\", \"reports\"], got "
                      + got(v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.items.size(); ++i) {
    if (v.items[i].shape != raw_value::form::quoted)
      throw value_error("expects quoted strings, got " + got(v.items[i])
                        + " as entry " + std::to_string(i + 1));
    out.push_back(v.items[i].text);
  }
  return out;
}

int as_int(const raw_value& v) {
  if (v.shape != raw_value::form::bare)
    throw value_error("expects an integer, got " + got(v));
  int x = 0;
  const char* first = v.text.data();
  const char* last = first + v.text.size();
  auto [end, ec] = std::from_chars(first, last, x);
  if (ec == std::errc::result_out_of_range && end == last)
    throw value_error("is out of range: " + got(v));
  if (ec != std::errc{} || end != last)
    throw value_error("expects an integer, got " + got(v));
  return x;
}

std::vector<int> as_int_list(const raw_value& v) {
  if (v.shape != raw_value::form::list)
    throw value_error("expects a list of integers such as [10, 60, 300], got "
                      + got(v));
  std::vector<int> out;
  for (size_t i = 0; i < v.items.size(); ++i) {
    try {
      out.push_back(as_int(v.items[i]));
    } catch (const value_error& e) {
      throw value_error(std::string{"entry "} + std::to_string(i + 1) + " "
                        + e.what());
    }
  }
  return out;
}

double as_real(const raw_value& v) {
  if (v.shape != raw_value::form::bare)
    throw value_error("expects a number, got " + got(v));
  double x = 0;
  const char* first = v.text.data();
  const char* last = first + v.text.size();
  auto [end, ec] = std::from_chars(first, last, x);
  if (ec != std::errc{} || end != last)
    throw value_error("expects a number, got " + got(v));
  return x;
}

bool as_bool(const raw_value& v, bool lenient) {
  const char* expected = lenient ? "expects true, false, 1 or 0, got "
                                 : "expects true or false, got ";
  if (v.shape != raw_value::form::bare)
    throw value_error(expected + got(v));
  auto text = lenient ? lower(v.text) : v.text;
  if (text == "true" || (lenient && text == "1"))
    return true;
  if (text == "false" || (lenient && text == "0"))
    return false;
  throw value_error(expected + got(v));
}

milliseconds as_duration(const raw_value& v, bool bare_seconds) {
  const std::string expected
    = bare_seconds ? "expects seconds or a duration such as 30s or 2min, got "
                   : "expects a duration with a unit (ms, s, min, h or d) "
                     "such as 250ms or 30s, got ";
  if (v.shape != raw_value::form::bare)
    throw value_error(expected + got(v));
  long long n = 0;
  const char* first = v.text.data();
  const char* last = first + v.text.size();
  auto [end, ec] = std::from_chars(first, last, n);
  if (ec == std::errc::result_out_of_range)
    throw value_error("is out of range: " + got(v));
  if (ec != std::errc{})
    throw value_error(expected + got(v));
  std::string_view unit{end, static_cast<size_t>(last - end)};
  long long factor = 0;
  if (unit == "ms")
    factor = 1;
  else if (unit == "s" || (unit.empty() && bare_seconds))
    factor = 1000;
  else if (unit == "min")
    factor = 60'000;
  else if (unit == "h")
    factor = 3'600'000;
  else if (unit == "d")
    factor = 86'400'000;
  else
    throw value_error(expected + got(v));
  if (n > max_duration_ms / factor || n < -max_duration_ms / factor)
    throw value_error("is out of range: " + got(v));
  return milliseconds{n * factor};
}

seconds as_seconds(const raw_value& v) {
  auto ms = as_duration(v, true);
  if (ms.count() % 1000 != 0)
    throw value_error("must be a whole number of seconds, got " + got(v));
  return std::chrono::duration_cast<seconds>(ms);
}

std::string_view trim(std::string_view text) {
  auto blank = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
  };
  while (!text.empty() && blank(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && blank(text.back()))
    text.remove_suffix(1);
  return text;
}

raw_value from_text(kind type, std::string_view text) {
  switch (type) {
    case kind::string: return quoted(std::string{text});
    case kind::string_list:
    case kind::integer_list: {
      raw_value list{raw_value::form::list, {}, {}};
      if (trim(text).empty())
        return list;
      size_t start = 0;
      while (true) {
        auto comma = text.find(',', start);
        auto item = trim(text.substr(start, comma - start));
        if (item.empty())
          throw value_error("has an empty entry in its comma-separated list");
        list.items.push_back(type == kind::string_list
                               ? quoted(std::string{item})
                               : bare(std::string{item}));
        if (comma == std::string_view::npos)
          break;
        start = comma + 1;
      }
      return list;
    }
    default: return bare(std::string{trim(text)});
  }
}

// -- text --------------------------------------------------------------------

std::string ms_text(milliseconds x) {
  return std::to_string(x.count()) + "ms";
}

std::string s_text(seconds x) {
  return std::to_string(x.count()) + "s";
}

std::string duration_text(milliseconds x) {
  auto n = x.count();
  if (n != 0 && n % 3'600'000 == 0)
    return std::to_string(n / 3'600'000) + "h";
  if (n != 0 && n % 60'000 == 0)
    return std::to_string(n / 60'000) + "min";
  if (n != 0 && n % 1000 == 0)
    return std::to_string(n / 1000) + "s";
  return ms_text(x);
}

std::string age_text(milliseconds x) {
  auto n = x.count();
  if (n != 0 && n % 86'400'000 == 0)
    return std::to_string(n / 86'400'000) + "d";
  return duration_text(x);
}

std::string real_text(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  if (ec != std::errc{})
    return "0";
  return std::string(buf, end);
}

std::string ini_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

std::string ini_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : ", ") + ini_string(items[i]);
  return out + "]";
}

} // namespace cmdbus::config::detail
