#include "cmdbus/model/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <stdexcept>
#include <utility>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <spdlog/formatter.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace cmdbus::log {

namespace {

std::mutex creation_mtx;

thread_local origin current_origin;

std::string lower(std::string_view text) {
  std::string out;
  for (auto c : text)
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
size_t utf8_length(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  auto c = b(0);
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2))
      return 0;
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F))
      return 0; // overlong, or a surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3))
      return 0;
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F))
      return 0; // overlong, or beyond U+10FFFF
    return 4;
  }
  return 0;
}

// `text` with every byte that is not part of valid UTF-8 replaced by U+FFFD.
std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    auto n = utf8_length(text);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      n = 1;
    } else {
      out.append(text.data(), n);
    }
    text.remove_prefix(n);
  }
  return out;
}

std::string iso_time(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  auto secs = time_point_cast<seconds>(time);
  if (secs > time)
    secs -= seconds{1};
  auto micros = duration_cast<microseconds>(time - secs).count();
  auto t = system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  auto n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lldZ",
                static_cast<long long>(micros));
  return buf;
}

// spdlog's formatter for the json format.
class json_formatter final : public spdlog::formatter {
public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    auto line = json_line(msg.time, msg.level,
                          {msg.logger_name.data(), msg.logger_name.size()},
                          current_origin,
                          {msg.payload.data(), msg.payload.size()});
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<json_formatter>();
  }
};

// spdlog's formatter for the journal format.
class journal_formatter final : public spdlog::formatter {
public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    auto line = journal_line(msg.level, current_origin,
                             {msg.payload.data(), msg.payload.size()});
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<journal_formatter>();
  }
};

} // namespace

origin origin_of(std::string_view instance_name) {
  auto slash = instance_name.find('/');
  if (slash == std::string_view::npos)
    return {std::string{instance_name}, {}};
  return {std::string{instance_name.substr(0, slash)},
          std::string{instance_name.substr(slash + 1)}};
}

scoped_origin::scoped_origin(origin o)
  : previous_(std::exchange(current_origin, std::move(o))) {}

scoped_origin::~scoped_origin() {
  current_origin = std::move(previous_);
}

format parse_format(std::string_view text) {
  auto name = lower(text);
  if (name == "text")
    return format::text;
  if (name == "json")
    return format::json;
  if (name == "journal")
    return format::journal;
  throw std::invalid_argument{"unknown log format '" + std::string{text}
                              + "' (use text, json or journal)"};
}

format format_from_env() {
  if (const char* own = std::getenv("CMDBUS_LOG_FORMAT"); own && *own)
    return parse_format(own);
  return format::text;
}

void set_format(format f) {
  if (f == format::json)
    logger()->set_formatter(std::make_unique<json_formatter>());
  else if (f == format::journal)
    logger()->set_formatter(std::make_unique<journal_formatter>());
  else
    logger()->set_formatter(std::make_unique<spdlog::pattern_formatter>());
}

std::string json_line(std::chrono::system_clock::time_point time,
                      spdlog::level::level_enum level, std::string_view logger,
                      const origin& from, std::string_view message) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w{buf};
  auto field = [&](const char* key, std::string_view value) {
    auto text = valid_utf8(value);
    w.Key(key);
    w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  };
  auto level_name = spdlog::level::to_string_view(level);
  w.StartObject();
  field("time", iso_time(time));
  field("level", {level_name.data(), level_name.size()});
  field("logger", logger);
  if (!from.actor.empty())
    field("actor", from.actor);
  if (!from.domain.empty())
    field("domain", from.domain);
  field("message", message);
  w.EndObject();
  return {buf.GetString(), buf.GetSize()};
}

std::string journal_line(spdlog::level::level_enum level, const origin& from,
                         std::string_view message) {
  char priority = '6';
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: priority = '7'; break;
    case spdlog::level::warn: priority = '4'; break;
    case spdlog::level::err: priority = '3'; break;
    case spdlog::level::critical: priority = '2'; break;
    default: break;
  }
  std::string line{'<', priority, '>'};
  if (!from.actor.empty() || !from.domain.empty()) {
    line += '[';
    line += from.actor;
    if (!from.domain.empty())
      line += (from.actor.empty() ? "" : "/") + from.domain;
    line += "] ";
  }
  line += one_line(message);
  return line;
}

std::shared_ptr<spdlog::logger> logger() {
  if (auto existing = spdlog::get(name))
    return existing;
  std::lock_guard<std::mutex> guard{creation_mtx};
  if (auto existing = spdlog::get(name))
    return existing;
  auto level = level_from_env(spdlog::get_level());
  auto created = spdlog::stderr_color_mt(name);
  created->set_level(level);
  return created;
}

spdlog::level::level_enum parse_level(std::string_view text) {
  auto name = lower(text);
  if (name == "warning")
    return spdlog::level::warn;
  if (name == "off")
    return spdlog::level::off;
  auto level = spdlog::level::from_str(name);
  // from_str answers "off" for every name it does not know.
  if (level == spdlog::level::off)
    throw std::invalid_argument{
      "unknown log level '" + std::string{text}
      + "' (use trace, debug, info, warn, error, critical or off)"};
  return level;
}

void set_level(spdlog::level::level_enum level) {
  logger()->set_level(level);
}

spdlog::level::level_enum level_from_env(spdlog::level::level_enum fallback) {
  if (const char* own = std::getenv("CMDBUS_LOG_LEVEL"); own && *own)
    return parse_level(own);
  const char* common = std::getenv("SPDLOG_LEVEL");
  if (common == nullptr || *common == '\0')
    return fallback;
  // spdlog's syntax: a global level and name=level pairs, comma-separated;
  // a pair for this logger wins over the global level.
  std::string text{common};
  auto level = fallback;
  size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find(',', pos);
    if (end == std::string::npos)
      end = text.size();
    auto item = one_line(std::string_view{text}.substr(pos, end - pos));
    auto eq = item.find('=');
    try {
      if (eq == std::string::npos) {
        if (!item.empty())
          level = parse_level(item);
      } else if (item.substr(0, eq) == name) {
        return parse_level(item.substr(eq + 1));
      }
    } catch (const std::invalid_argument&) {
      // spdlog ignores what it cannot parse in SPDLOG_LEVEL; so do we.
    }
    pos = end + 1;
  }
  return level;
}

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool space = false;
  for (auto c : text) {
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      space = !out.empty();
      continue;
    }
    if (space)
      out += ' ';
    space = false;
    out += c;
  }
  return out;
}

} // namespace cmdbus::log
