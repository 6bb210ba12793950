#pragma once

// The library's logger: one spdlog logger named "cmdbus". An application
// that embeds cmdbus routes or silences it like any spdlog logger: register
// its own logger under that name before the first cmdbus call, or change
// the level and sinks of this one (spdlog::get("cmdbus")).
//
// Entries are one line each: texts that may hold line breaks (libpq's
// messages do) go through one_line() first.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

namespace cmdbus::log {

/// The name the logger is registered under.
inline constexpr const char* name = "cmdbus";

/// Returns the "cmdbus" logger: the one registered with spdlog under that
/// name, else a new one writing to stderr. A new logger takes its level from
/// the environment (see level_from_env), else from spdlog's default level.
std::shared_ptr<spdlog::logger> logger();

/// Parses a level name (trace, debug, info, warn, error, critical, off;
/// also "warning"); throws std::invalid_argument naming the choices.
spdlog::level::level_enum parse_level(std::string_view text);

/// Sets the level of the "cmdbus" logger.
void set_level(spdlog::level::level_enum level);

/// Returns the level that CMDBUS_LOG_LEVEL sets, else the one SPDLOG_LEVEL
/// sets for this logger (spdlog's syntax: "debug" or "warn,cmdbus=debug"),
/// else `fallback`. An unknown level name in CMDBUS_LOG_LEVEL throws
/// std::invalid_argument.
spdlog::level::level_enum level_from_env(spdlog::level::level_enum fallback);

/// The format of the entries: `text` (spdlog's default pattern), `json`
/// (one JSON object per line: time, level, logger, actor, domain, message)
/// or `journal` (for journald and syslog: see journal_line).
enum class format { text, json, journal };

/// Parses a format name (text, json, journal; any case); throws
/// std::invalid_argument naming the choices.
format parse_format(std::string_view text);

/// Returns the format CMDBUS_LOG_FORMAT sets, else text. An unknown name
/// throws std::invalid_argument.
format format_from_env();

/// Sets the format of the "cmdbus" logger (a new formatter on its sinks).
void set_format(format f);

/// Who writes an entry: an actor instance ("poller/payments") and its
/// domain, when known. The JSON format prints them as fields; the text
/// format does not (the text says it where it matters).
struct origin {
  std::string actor;
  std::string domain;
};

/// Sets the origin of the entries this thread logs while it lives (the
/// previous one comes back afterwards).
class scoped_origin {
public:
  explicit scoped_origin(origin o);
  ~scoped_origin();
  scoped_origin(const scoped_origin&) = delete;
  scoped_origin& operator=(const scoped_origin&) = delete;

private:
  origin previous_;
};

/// One JSON object on one line (no line break), built with RapidJSON's
/// writer: `time` (ISO 8601 UTC with microseconds), `level`, `logger`,
/// `actor` and `domain` (when not empty), `message`. Bytes that are not
/// UTF-8 become U+FFFD, so the line always parses.
std::string json_line(std::chrono::system_clock::time_point time,
                      spdlog::level::level_enum level, std::string_view logger,
                      const origin& from, std::string_view message);

/// One line for journald: the syslog priority of `level` as a `<N>` prefix
/// (trace and debug 7, info 6, warn 4, error 3, critical 2), the origin in
/// brackets when known ("[poller/payments] ", "[worker] "), the message. No
/// time: the journal records its own.
std::string journal_line(spdlog::level::level_enum level, const origin& from,
                         std::string_view message);

/// Returns `text` on one line: line breaks and tabs become spaces, runs of
/// spaces collapse to one, and leading and trailing spaces go.
std::string one_line(std::string_view text);

template <class... Ts>
void trace(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) {
  logger()->trace(fmt, std::forward<Ts>(xs)...);
}

template <class... Ts>
void debug(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) {
  logger()->debug(fmt, std::forward<Ts>(xs)...);
}

template <class... Ts>
void info(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) {
  logger()->info(fmt, std::forward<Ts>(xs)...);
}

template <class... Ts>
void warn(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) {
  logger()->warn(fmt, std::forward<Ts>(xs)...);
}

template <class... Ts>
void error(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) {
  logger()->error(fmt, std::forward<Ts>(xs)...);
}

/// Logs at `level` with `from` as the entry's origin (see origin).
template <class... Ts>
void log_from(const origin& from, spdlog::level::level_enum level,
              spdlog::format_string_t<Ts...> fmt, Ts&&... xs) {
  scoped_origin scope{from};
  logger()->log(level, fmt, std::forward<Ts>(xs)...);
}

/// Logs with a fixed origin: `log::from(st.name).warn(...)`.
class origin_logger {
public:
  explicit origin_logger(origin o) : from_(std::move(o)) {
    // nop
  }

  template <class... Ts>
  void debug(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) const {
    log_from(from_, spdlog::level::debug, fmt, std::forward<Ts>(xs)...);
  }

  template <class... Ts>
  void info(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) const {
    log_from(from_, spdlog::level::info, fmt, std::forward<Ts>(xs)...);
  }

  template <class... Ts>
  void warn(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) const {
    log_from(from_, spdlog::level::warn, fmt, std::forward<Ts>(xs)...);
  }

  template <class... Ts>
  void error(spdlog::format_string_t<Ts...> fmt, Ts&&... xs) const {
    log_from(from_, spdlog::level::err, fmt, std::forward<Ts>(xs)...);
  }

private:
  origin from_;
};

/// The origin of an actor instance named "role/domain" ("poller/payments":
/// actor "poller", domain "payments"); a name without '/' is the actor
/// alone.
origin origin_of(std::string_view instance_name);

/// Returns a logger whose entries carry the origin of `instance_name`.
inline origin_logger from(std::string_view instance_name) {
  return origin_logger{origin_of(instance_name)};
}

/// Returns a logger whose entries carry `o`.
inline origin_logger from(origin o) {
  return origin_logger{std::move(o)};
}

} // namespace cmdbus::log
