#include "model/log.hpp"

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace cmdbus::log {

namespace {

std::mutex creation_mtx;

} // namespace

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
  std::string lower;
  for (auto c : text)
    lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "warning")
    return spdlog::level::warn;
  if (lower == "off")
    return spdlog::level::off;
  auto level = spdlog::level::from_str(lower);
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
