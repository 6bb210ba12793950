#include "config/worker_config.hpp"

#include "db/error.hpp"
#include "db/queue_name.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace cmdbus::config {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// -- the settings ------------------------------------------------------------

/// How a setting's value is written.
enum class kind {
  string,
  string_list,
  integer,
  integer_list,
  real,
  boolean,
  /// An integer with a unit (ms, s, min, h).
  duration,
  /// Like `duration`, but a bare integer means seconds; whole seconds only.
  seconds_duration,
};

enum class setting_id {
  dsn,
  domains,
  concurrency,
  prefetch,
  visibility_timeout,
  poll_interval,
  use_notify,
  statement_timeout,
  shutdown_timeout,
  flush_interval,
  tick,
  max_attempts,
  backoff,
  jitter,
};

/// One setting and its names in the file, the environment and the CLI.
struct setting {
  setting_id id;
  kind type;
  /// Section in the file; "" is the top level.
  std::string_view section;
  std::string_view key;
  /// Environment variable, or nullptr.
  const char* env;
  /// Command-line option taking a value, or "".
  std::string_view option;
};

constexpr setting settings[] = {
    {setting_id::dsn, kind::string, "", "dsn", "CMDBUS_DSN", "--dsn"},
    {setting_id::domains, kind::string_list, "worker", "domains",
     "CMDBUS_DOMAINS", ""},
    {setting_id::concurrency, kind::integer, "worker", "concurrency",
     "CMDBUS_CONCURRENCY", "--concurrency"},
    {setting_id::prefetch, kind::integer, "worker", "prefetch",
     "CMDBUS_PREFETCH", "--prefetch"},
    {setting_id::visibility_timeout, kind::seconds_duration, "worker",
     "visibility-timeout", "CMDBUS_VISIBILITY_TIMEOUT", "--visibility-timeout"},
    {setting_id::poll_interval, kind::duration, "worker", "poll-interval",
     "CMDBUS_POLL_INTERVAL", "--poll-interval"},
    {setting_id::use_notify, kind::boolean, "worker", "use-notify",
     "CMDBUS_USE_NOTIFY", ""},
    {setting_id::statement_timeout, kind::duration, "worker",
     "statement-timeout", "CMDBUS_STATEMENT_TIMEOUT", "--statement-timeout"},
    {setting_id::shutdown_timeout, kind::duration, "worker", "shutdown-timeout",
     "CMDBUS_SHUTDOWN_TIMEOUT", "--shutdown-timeout"},
    {setting_id::flush_interval, kind::duration, "worker", "flush-interval",
     "CMDBUS_FLUSH_INTERVAL", "--flush-interval"},
    {setting_id::tick, kind::boolean, "worker", "tick", nullptr, ""},
    {setting_id::max_attempts, kind::integer, "retry", "max-attempts",
     "CMDBUS_MAX_ATTEMPTS", "--max-attempts"},
    {setting_id::backoff, kind::integer_list, "retry", "backoff",
     "CMDBUS_BACKOFF", "--backoff"},
    {setting_id::jitter, kind::real, "retry", "jitter", "CMDBUS_BACKOFF_JITTER",
     "--jitter"},
};

const setting* find_setting(std::string_view section, std::string_view key) {
  for (const auto& s : settings)
    if (s.section == section && s.key == key)
      return &s;
  return nullptr;
}

const setting* find_option(std::string_view option) {
  for (const auto& s : settings)
    if (!s.option.empty() && s.option == option)
      return &s;
  return nullptr;
}

// -- raw values and their conversion -----------------------------------------

/// A value as written, before conversion to the setting's type.
struct raw_value {
  enum class form { bare, quoted, list };
  form shape = form::bare;
  /// The text of a bare or quoted value.
  std::string text;
  /// The items of a list.
  std::vector<raw_value> items;
};

raw_value bare(std::string text) {
  return {raw_value::form::bare, std::move(text), {}};
}

raw_value quoted(std::string text) {
  return {raw_value::form::quoted, std::move(text), {}};
}

/// A value that does not fit its setting; the message is completed with the
/// place (file:line, variable or option) by the caller.
class value_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Describes what was found, for "expects X, got Y".
std::string got(const raw_value& v) {
  switch (v.shape) {
    case raw_value::form::bare:
      return db::printable(v.text);
    case raw_value::form::quoted:
      return "the string " + db::printable(v.text);
    case raw_value::form::list:
      return "a list";
  }
  return "a value";
}

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

std::string lower(std::string_view text) {
  std::string out{text};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Parses true/false; `lenient` (environment) also accepts 1/0 and any case.
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

/// The largest magnitude of a duration: about 31 years.
constexpr long long max_duration_ms = 1'000'000'000'000LL;

/// Parses `<integer><unit>`; without a unit, seconds if `bare_seconds`.
milliseconds as_duration(const raw_value& v, bool bare_seconds) {
  const std::string expected
    = bare_seconds ? "expects seconds or a duration such as 30s or 2min, got "
                   : "expects a duration with a unit (ms, s, min or h) such "
                     "as 250ms or 30s, got ";
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

/// Converts `v` and stores it in `cfg`. Throws value_error.
void assign(worker_config& cfg, const setting& s, const raw_value& v,
            bool lenient) {
  switch (s.id) {
    case setting_id::dsn:
      cfg.dsn = as_string(v);
      break;
    case setting_id::domains:
      cfg.domains = as_string_list(v);
      break;
    case setting_id::concurrency:
      cfg.concurrency = as_int(v);
      break;
    case setting_id::prefetch:
      cfg.prefetch = as_int(v);
      break;
    case setting_id::visibility_timeout:
      cfg.visibility_timeout = as_seconds(v);
      break;
    case setting_id::poll_interval:
      cfg.poll_interval = as_duration(v, false);
      break;
    case setting_id::use_notify:
      cfg.use_notify = as_bool(v, lenient);
      break;
    case setting_id::statement_timeout:
      cfg.statement_timeout = as_duration(v, false);
      break;
    case setting_id::shutdown_timeout:
      cfg.shutdown_timeout = as_duration(v, false);
      break;
    case setting_id::flush_interval:
      cfg.flush_interval = as_duration(v, false);
      break;
    case setting_id::tick:
      cfg.tick = as_bool(v, lenient);
      break;
    case setting_id::max_attempts:
      cfg.retry.max_attempts = as_int(v);
      break;
    case setting_id::backoff:
      cfg.retry.backoff_seconds = as_int_list(v);
      break;
    case setting_id::jitter:
      cfg.retry.jitter = as_real(v);
      break;
  }
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

/// Turns an environment or command-line text into a raw value: lists are
/// comma-separated (an empty text is an empty list), strings are taken as is.
raw_value from_text(const setting& s, std::string_view text) {
  switch (s.type) {
    case kind::string:
      return quoted(std::string{text});
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
        list.items.push_back(s.type == kind::string_list
                               ? quoted(std::string{item})
                               : bare(std::string{item}));
        if (comma == std::string_view::npos)
          break;
        start = comma + 1;
      }
      return list;
    }
    default:
      return bare(std::string{trim(text)});
  }
}

// -- suggestions for unknown keys --------------------------------------------

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string section_label(std::string_view section) {
  return section.empty() ? std::string{"at the top level"}
                         : "in section [" + std::string{section} + "]";
}

/// A hint for an unknown key: the right section, or a close spelling.
std::string key_hint(std::string_view section, std::string_view key) {
  auto dashed = std::string{key};
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  for (const auto& s : settings)
    if (s.key == dashed && s.section != section)
      return " ('" + dashed + "' belongs "
             + (s.section.empty() ? std::string{"at the top level"}
                                  : "in section [" + std::string{s.section}
                                      + "]")
             + ")";
  const setting* best = nullptr;
  size_t best_distance = 3;
  for (const auto& s : settings) {
    if (s.section != section)
      continue;
    auto d = edit_distance(dashed, s.key);
    if (d < best_distance) {
      best = &s;
      best_distance = d;
    }
  }
  if (best != nullptr)
    return " (did you mean '" + std::string{best->key} + "'?)";
  return {};
}

// -- the INI parser ----------------------------------------------------------

/// Parses the CAF-INI subset described in the header and applies each entry.
class ini_parser {
public:
  ini_parser(worker_config& cfg, std::string_view text,
             const std::string& file_name)
    : cfg_(cfg), text_(text), file_name_(file_name) {
    // nop
  }

  void run() {
    while (true) {
      skip_blanks();
      if (at_end())
        return;
      auto c = peek();
      if (c == '\n') {
        next_line();
      } else if (c == ';') {
        skip_comment();
      } else if (c == '[') {
        parse_section();
      } else {
        parse_entry();
      }
    }
  }

private:
  [[noreturn]] void fail(int line, const std::string& message) const {
    throw config_error(file_name_ + ":" + std::to_string(line) + ": "
                       + message);
  }

  bool at_end() const noexcept {
    return pos_ >= text_.size();
  }

  char peek() const noexcept {
    return at_end() ? '\0' : text_[pos_];
  }

  void next_line() {
    ++pos_;
    ++line_;
  }

  void skip_blanks() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r'))
      ++pos_;
  }

  void skip_comment() {
    while (!at_end() && peek() != '\n')
      ++pos_;
  }

  /// Skips blanks, newlines and comments (inside lists).
  void skip_space() {
    while (true) {
      skip_blanks();
      if (peek() == ';')
        skip_comment();
      else if (peek() == '\n')
        next_line();
      else
        return;
    }
  }

  /// Expects the end of the line, allowing a trailing comment.
  void end_of_line(const std::string& after) {
    skip_blanks();
    if (peek() == ';')
      skip_comment();
    if (at_end())
      return;
    if (peek() != '\n')
      fail(line_, "unexpected text after " + after);
    next_line();
  }

  static bool is_key_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
           || c == '.';
  }

  void parse_section() {
    auto line = line_;
    ++pos_;
    auto start = pos_;
    while (!at_end() && peek() != ']' && peek() != '\n')
      ++pos_;
    if (peek() != ']')
      fail(line, "missing ']' in section header");
    auto name = trim(text_.substr(start, pos_ - start));
    ++pos_;
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_key_char))
      fail(line, "invalid section header");
    if (name == "global")
      section_.clear();
    else if (name == "worker" || name == "retry")
      section_ = std::string{name};
    else
      fail(line, "unknown section [" + std::string{name}
                   + "] (expected [worker] or [retry])");
    end_of_line("the section header [" + std::string{name} + "]");
  }

  void parse_entry() {
    auto line = line_;
    auto start = pos_;
    while (!at_end() && is_key_char(peek()))
      ++pos_;
    auto key = std::string{text_.substr(start, pos_ - start)};
    if (key.empty())
      fail(line, "expected a key, a [section] header or a ';' comment");
    if (key.find('.') != std::string::npos) {
      auto dot = key.rfind('.');
      fail(line, "dotted key '" + key + "' is not allowed in a config file;"
                   " write '" + key.substr(dot + 1) + "' in a ["
                   + key.substr(0, key.find('.')) + "] section");
    }
    skip_blanks();
    if (peek() == '{')
      fail(line, "'" + key + " { ... }' blocks are not supported; use a ["
                   + key + "] section");
    if (peek() != '=')
      fail(line, "expected '=' after key '" + key + "'");
    ++pos_;
    auto where = "key '" + key + "' " + section_label(section_);
    const auto* s = find_setting(section_, key);
    if (s == nullptr)
      fail(line, "unknown " + where + key_hint(section_, key));
    auto [it, added] = seen_.emplace(
      std::string{s->section} + " " + std::string{s->key}, line);
    if (!added)
      fail(line, "duplicate " + where + " (first set on line "
                   + std::to_string(it->second) + ")");
    auto value = parse_value(key, true);
    // Converting first reports an unquoted string (e.g. a DSN with spaces)
    // as such rather than as trailing text.
    try {
      assign(cfg_, *s, value, false);
    } catch (const value_error& e) {
      fail(line, where + " " + e.what());
    }
    end_of_line("the value of '" + key + "'");
  }

  raw_value parse_value(const std::string& key, bool top) {
    skip_blanks();
    auto c = peek();
    if (at_end() || c == '\n' || c == ';')
      fail(line_, "missing value for key '" + key + "'");
    if (c == '"' || c == '\'')
      return quoted(parse_string());
    if (c == '[') {
      if (!top)
        fail(line_, "nested lists are not supported (key '" + key + "')");
      return parse_list(key);
    }
    if (c == '{')
      fail(line_, "brace syntax is not supported (key '" + key + "')");
    auto start = pos_;
    while (!at_end()) {
      c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ','
          || c == ']' || c == '[' || c == ';' || c == '"' || c == '\'')
        break;
      ++pos_;
    }
    return bare(std::string{text_.substr(start, pos_ - start)});
  }

  std::string parse_string() {
    auto line = line_;
    auto quote = peek();
    ++pos_;
    std::string out;
    while (true) {
      if (at_end() || peek() == '\n')
        fail(line, "unterminated string (missing closing quote)");
      auto c = peek();
      ++pos_;
      if (c == quote)
        return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      switch (peek()) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\':
        case '"':
        case '\'':
          out += peek();
          break;
        default:
          fail(line, "invalid escape sequence in a string (use \\\\, \\\", "
                     "\\', \\n, \\t or \\r)");
      }
      ++pos_;
    }
  }

  raw_value parse_list(const std::string& key) {
    auto open_line = line_;
    ++pos_;
    raw_value list{raw_value::form::list, {}, {}};
    bool expect_item = true;
    while (true) {
      skip_space();
      if (at_end())
        fail(open_line, "unterminated list of key '" + key
                          + "' (missing ']')");
      auto c = peek();
      if (c == ']') {
        ++pos_;
        return list;
      }
      if (c == ',') {
        if (expect_item)
          fail(line_, "unexpected ',' in the list of key '" + key + "'");
        ++pos_;
        expect_item = true;
        continue;
      }
      if (!expect_item)
        fail(line_, "expected ',' or ']' in the list of key '" + key + "'");
      list.items.push_back(parse_value(key, false));
      expect_item = false;
    }
  }

  worker_config& cfg_;
  std::string_view text_;
  const std::string& file_name_;
  size_t pos_ = 0;
  int line_ = 1;
  /// The current section; "" is the top level.
  std::string section_;
  /// Keys set so far ("section key" -> line).
  std::map<std::string, int> seen_;
};

// -- formatting --------------------------------------------------------------

std::string ms_text(milliseconds x) {
  return std::to_string(x.count()) + "ms";
}

std::string s_text(seconds x) {
  return std::to_string(x.count()) + "s";
}

/// The shortest exact unit: 1h, 2min, 30s or 250ms.
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

std::string real_text(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  if (ec != std::errc{})
    return "0";
  return std::string(buf, end);
}

/// Quotes `text` as a CAF-INI string.
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

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw config_error("cannot read config file '" + path
                       + "': " + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad())
    throw config_error("cannot read config file '" + path + "'");
  return buf.str();
}

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size()
         && lower(text.substr(0, prefix.size())) == prefix;
}

/// Masks the values of `password` keywords; in a URI, values end at '&'.
std::string mask_password_keywords(std::string_view dsn, bool uri) {
  std::string out;
  size_t i = 0;
  constexpr std::string_view keyword = "password";
  while (i < dsn.size()) {
    bool boundary = i == 0 || dsn[i - 1] == ' ' || dsn[i - 1] == '\t'
                    || dsn[i - 1] == '\n' || dsn[i - 1] == '?'
                    || dsn[i - 1] == '&';
    if (!boundary || !starts_with_nocase(dsn.substr(i), keyword)) {
      out += dsn[i++];
      continue;
    }
    auto j = i + keyword.size();
    while (j < dsn.size() && (dsn[j] == ' ' || dsn[j] == '\t'))
      ++j;
    if (j >= dsn.size() || dsn[j] != '=') {
      out += dsn[i++];
      continue;
    }
    ++j;
    out += dsn.substr(i, j - i);
    while (j < dsn.size() && (dsn[j] == ' ' || dsn[j] == '\t'))
      out += dsn[j++];
    if (!uri && j < dsn.size() && dsn[j] == '\'') {
      ++j;
      while (j < dsn.size() && dsn[j] != '\'')
        j += dsn[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, dsn.size());
    } else {
      while (j < dsn.size() && dsn[j] != ' ' && dsn[j] != '\t'
             && dsn[j] != '\n' && !(uri && (dsn[j] == '&' || dsn[j] == '#')))
        ++j;
    }
    out += "***";
    i = j;
  }
  return out;
}

} // namespace

// -- public API --------------------------------------------------------------

const char* help_requested::what() const noexcept {
  return worker_help();
}

std::vector<std::string> validate(const worker_config& cfg) {
  std::vector<std::string> problems;
  auto report = [&](std::string text) { problems.push_back(std::move(text)); };
  if (cfg.domains.empty())
    report("no domains configured: set domains in [worker], CMDBUS_DOMAINS "
           "or --domain");
  std::set<std::string> seen;
  for (const auto& domain : cfg.domains) {
    try {
      db::validate_domain(domain);
    } catch (const db::invalid_argument& e) {
      report(std::string{"domains: "} + e.what());
      continue;
    }
    if (!seen.insert(domain).second)
      report("domains: " + db::printable(domain) + " is listed twice");
  }
  if (cfg.concurrency < 1 || cfg.concurrency > 4096)
    report("concurrency (" + std::to_string(cfg.concurrency)
           + ") must be between 1 and 4096");
  if (cfg.prefetch < 0 || cfg.prefetch > 4096)
    report("prefetch (" + std::to_string(cfg.prefetch)
           + ") must be between 0 and 4096");
  if (cfg.visibility_timeout < seconds{1})
    report("visibility-timeout (" + s_text(cfg.visibility_timeout)
           + ") must be at least 1s");
  if (cfg.poll_interval < milliseconds{10}
      || cfg.poll_interval > std::chrono::hours{1})
    report("poll-interval (" + ms_text(cfg.poll_interval)
           + ") must be between 10ms and 1h");
  if (cfg.retry.max_attempts < 1)
    report("max-attempts (" + std::to_string(cfg.retry.max_attempts)
           + ") must be at least 1");
  for (size_t i = 0; i < cfg.retry.backoff_seconds.size(); ++i)
    if (cfg.retry.backoff_seconds[i] < 0)
      report("backoff entry " + std::to_string(i + 1) + " ("
             + std::to_string(cfg.retry.backoff_seconds[i])
             + "s) must not be negative");
  if (!(cfg.retry.jitter >= 0.0 && cfg.retry.jitter <= 1.0))
    report("jitter (" + real_text(cfg.retry.jitter)
           + ") must be between 0 and 1");
  if (cfg.statement_timeout <= milliseconds{0})
    report("statement-timeout (" + ms_text(cfg.statement_timeout)
           + ") must be above 0ms");
  else if (cfg.visibility_timeout >= seconds{1}
           && cfg.statement_timeout >= cfg.visibility_timeout)
    report("statement-timeout (" + ms_text(cfg.statement_timeout)
           + ") must be below visibility-timeout ("
           + s_text(cfg.visibility_timeout) + ")");
  if (cfg.shutdown_timeout < milliseconds{0})
    report("shutdown-timeout (" + ms_text(cfg.shutdown_timeout)
           + ") must not be negative");
  if (cfg.flush_interval < milliseconds{0}
      || cfg.flush_interval > milliseconds{1000})
    report("flush-interval (" + ms_text(cfg.flush_interval)
           + ") must be between 0ms and 1000ms");
  return problems;
}

void apply_ini(worker_config& cfg, std::string_view text,
               const std::string& file_name) {
  ini_parser{cfg, text, file_name}.run();
}

void apply_env(worker_config& cfg, const env_lookup& getenv) {
  for (const auto& s : settings) {
    if (s.env == nullptr)
      continue;
    auto value = getenv(s.env);
    if (!value || value->empty())
      continue;
    try {
      assign(cfg, s, from_text(s, *value), true);
    } catch (const value_error& e) {
      throw config_error(std::string{"environment variable "} + s.env + " "
                         + e.what());
    }
  }
}

std::optional<std::string> apply_args(worker_config& cfg,
                                      const std::vector<std::string>& args) {
  for (const auto& arg : args)
    if (arg == "--help" || arg == "-h")
      throw help_requested{};
  std::optional<std::string> config_file;
  bool domains_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
      throw config_error("unexpected argument "
                         + db::printable(mask_dsn(arg)) + " (see --help)");
    auto eq = arg.find('=');
    auto name = arg.substr(0, eq);
    std::optional<std::string> value;
    if (eq != std::string::npos)
      value = arg.substr(eq + 1);
    if (name == "--no-notify" || name == "--tick" || name == "--dump-config") {
      if (value)
        throw config_error("option " + name + " takes no value");
      if (name == "--no-notify")
        cfg.use_notify = false;
      else if (name == "--tick")
        cfg.tick = true;
      else
        cfg.dump_config = true;
      continue;
    }
    const auto* s = find_option(name);
    if (s == nullptr && name != "--config" && name != "--domain")
      throw config_error("unknown option " + db::printable(name)
                         + " (see --help)");
    if (!value) {
      if (i + 1 >= args.size())
        throw config_error("option " + name + " needs a value");
      value = args[++i];
    }
    if (name == "--config") {
      if (value->empty())
        throw config_error("option --config needs a file name");
      config_file = *value;
    } else if (name == "--domain") {
      if (!domains_given)
        cfg.domains.clear();
      domains_given = true;
      cfg.domains.push_back(*value);
    } else {
      try {
        assign(cfg, *s, from_text(*s, *value), true);
      } catch (const value_error& e) {
        throw config_error("option " + name + " " + e.what());
      }
    }
  }
  return config_file;
}

worker_config load(const std::vector<std::string>& args,
                   const env_lookup& getenv) {
  // A first pass finds --config and reports command-line errors (and --help)
  // before any file is read.
  worker_config scratch;
  auto config_file = apply_args(scratch, args);
  if (!config_file) {
    auto from_env = getenv("CMDBUS_CONFIG");
    if (from_env && !from_env->empty())
      config_file = *from_env;
  }
  worker_config cfg;
  if (config_file)
    apply_ini(cfg, read_file(*config_file), *config_file);
  apply_env(cfg, getenv);
  apply_args(cfg, args);
  auto problems = validate(cfg);
  if (!problems.empty()) {
    std::string text;
    for (const auto& problem : problems) {
      if (!text.empty())
        text += '\n';
      text += problem;
    }
    throw config_error(text);
  }
  return cfg;
}

const char* worker_help() {
  return R"(Usage: cmdbus worker [options]

Runs the command handlers of the configured domains until stopped (SIGINT or
SIGTERM), or drains every domain once with --tick.

Options:
  --config FILE            CAF-INI config file (else $CMDBUS_CONFIG, else none)
  --dsn DSN                libpq connection string or URI (default: the libpq
                           environment)
  --domain D               domain to serve; repeat for several; replaces the
                           domains of the file and of $CMDBUS_DOMAINS
  --concurrency N          handler slots per domain, 1..4096 (16)
  --prefetch N             messages read ahead of free handler slots per
                           domain, 0..4096 (0)
  --visibility-timeout S   seconds or a duration, >= 1s (30s)
  --poll-interval DUR      poll period, 10ms..1h (1s)
  --no-notify              poll only, without LISTEN/NOTIFY
  --statement-timeout DUR  > 0 and below the visibility timeout (25s)
  --shutdown-timeout DUR   how long a stop waits for in-flight commands (30s)
  --flush-interval DUR     batching delay of side effects and of freed
                           handler slots, 0..1000ms (2ms)
  --max-attempts N         attempts per command, >= 1 (3)
  --backoff LIST           retry delays in seconds (10,60,300); an empty
                           list (--backoff=) means 30s after every attempt
  --jitter X               random fraction 0..1 of each delay (0)
  --tick                   drain every domain once, then exit
  --dump-config            print the effective configuration and exit
  -h, --help               show this help

Durations are an integer with a unit: ms, s, min or h (250ms, 30s, 1min).
Precedence: defaults < config file < environment < command line.

Environment: CMDBUS_CONFIG, CMDBUS_DSN, CMDBUS_DOMAINS (a,b),
  CMDBUS_CONCURRENCY, CMDBUS_PREFETCH, CMDBUS_VISIBILITY_TIMEOUT,
  CMDBUS_POLL_INTERVAL, CMDBUS_USE_NOTIFY (true/false/1/0),
  CMDBUS_STATEMENT_TIMEOUT,
  CMDBUS_SHUTDOWN_TIMEOUT, CMDBUS_FLUSH_INTERVAL, CMDBUS_MAX_ATTEMPTS,
  CMDBUS_BACKOFF (10,60,300), CMDBUS_BACKOFF_JITTER.

Config file (CAF INI; ';' starts a comment):
  dsn = "host=db dbname=app"
  [worker]
  domains = ["payments", "reports"]
  concurrency = 16
  prefetch = 0
  visibility-timeout = 30s
  poll-interval = 1s
  use-notify = true
  statement-timeout = 25s
  shutdown-timeout = 30s
  flush-interval = 2ms
  [retry]
  max-attempts = 3
  backoff = [10, 60, 300]
  jitter = 0.1
)";
}

std::string mask_dsn(std::string_view dsn) {
  bool uri = starts_with_nocase(dsn, "postgresql://")
             || starts_with_nocase(dsn, "postgres://");
  if (!uri)
    return mask_password_keywords(dsn, false);
  std::string text{dsn};
  auto authority = text.find("://") + 3;
  auto query = text.find('?', authority);
  auto at = text.rfind('@', query == std::string::npos ? query : query - 1);
  if (at != std::string::npos && at >= authority) {
    auto colon = text.find(':', authority);
    if (colon != std::string::npos && colon < at)
      text.replace(colon + 1, at - colon - 1, "***");
  }
  return mask_password_keywords(text, true);
}

std::string describe(const worker_config& cfg) {
  std::string out;
  out += "dsn = " + ini_string(mask_dsn(cfg.dsn)) + "\n";
  out += "[worker]\n";
  out += "domains = [";
  for (size_t i = 0; i < cfg.domains.size(); ++i)
    out += (i == 0 ? "" : ", ") + ini_string(cfg.domains[i]);
  out += "]\n";
  out += "concurrency = " + std::to_string(cfg.concurrency) + "\n";
  out += "prefetch = " + std::to_string(cfg.prefetch) + "\n";
  out += "visibility-timeout = "
         + duration_text(std::chrono::duration_cast<milliseconds>(
           cfg.visibility_timeout))
         + "\n";
  out += "poll-interval = " + duration_text(cfg.poll_interval) + "\n";
  out += std::string{"use-notify = "} + (cfg.use_notify ? "true" : "false")
         + "\n";
  out += "statement-timeout = " + duration_text(cfg.statement_timeout) + "\n";
  out += "shutdown-timeout = " + duration_text(cfg.shutdown_timeout) + "\n";
  out += "flush-interval = " + duration_text(cfg.flush_interval) + "\n";
  out += std::string{"tick = "} + (cfg.tick ? "true" : "false") + "\n";
  out += "[retry]\n";
  out += "max-attempts = " + std::to_string(cfg.retry.max_attempts) + "\n";
  out += "backoff = [";
  for (size_t i = 0; i < cfg.retry.backoff_seconds.size(); ++i)
    out += (i == 0 ? "" : ", ")
           + std::to_string(cfg.retry.backoff_seconds[i]);
  out += "]\n";
  out += "jitter = " + real_text(cfg.retry.jitter) + "\n";
  return out;
}

} // namespace cmdbus::config
