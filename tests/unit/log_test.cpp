// The library's named logger: level names, the environment, one line per
// entry, and an application's own "cmdbus" logger taking precedence.

#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include "cmdbus/model/log.hpp"

using namespace cmdbus;

namespace {

/// Sets an environment variable for one scope.
struct scoped_env {
  scoped_env(const char* key, const char* value) : key(key) {
    if (const char* old = std::getenv(key))
      saved = old;
    if (value != nullptr)
      setenv(key, value, 1);
    else
      unsetenv(key);
  }
  ~scoped_env() {
    if (saved)
      setenv(key, saved->c_str(), 1);
    else
      unsetenv(key);
  }
  const char* key;
  std::optional<std::string> saved;
};

} // namespace

TEST(LogLevel, ParsesEveryNameAndRejectsOthers) {
  EXPECT_EQ(log::parse_level("trace"), spdlog::level::trace);
  EXPECT_EQ(log::parse_level("DEBUG"), spdlog::level::debug);
  EXPECT_EQ(log::parse_level("info"), spdlog::level::info);
  EXPECT_EQ(log::parse_level("warn"), spdlog::level::warn);
  EXPECT_EQ(log::parse_level("warning"), spdlog::level::warn);
  EXPECT_EQ(log::parse_level("error"), spdlog::level::err);
  EXPECT_EQ(log::parse_level("critical"), spdlog::level::critical);
  EXPECT_EQ(log::parse_level("off"), spdlog::level::off);
  EXPECT_THROW(log::parse_level("verbose"), std::invalid_argument);
  EXPECT_THROW(log::parse_level(""), std::invalid_argument);
}

TEST(LogLevel, OwnVariableWinsOverSpdlogs) {
  scoped_env own{"CMDBUS_LOG_LEVEL", "error"};
  scoped_env common{"SPDLOG_LEVEL", "debug"};
  EXPECT_EQ(log::level_from_env(spdlog::level::info), spdlog::level::err);
}

TEST(LogLevel, SpdlogVariableGlobalAndPerLogger) {
  scoped_env own{"CMDBUS_LOG_LEVEL", nullptr};
  {
    scoped_env common{"SPDLOG_LEVEL", "debug"};
    EXPECT_EQ(log::level_from_env(spdlog::level::info), spdlog::level::debug);
  }
  {
    scoped_env common{"SPDLOG_LEVEL", "warn,cmdbus=trace,other=off"};
    EXPECT_EQ(log::level_from_env(spdlog::level::info), spdlog::level::trace);
  }
  {
    scoped_env common{"SPDLOG_LEVEL", "other=debug"};
    EXPECT_EQ(log::level_from_env(spdlog::level::info), spdlog::level::info);
  }
  {
    scoped_env common{"SPDLOG_LEVEL", "nonsense"};
    EXPECT_EQ(log::level_from_env(spdlog::level::warn), spdlog::level::warn);
  }
}

TEST(LogLevel, UnknownOwnLevelIsAnError) {
  scoped_env own{"CMDBUS_LOG_LEVEL", "loud"};
  EXPECT_THROW(log::level_from_env(spdlog::level::info),
               std::invalid_argument);
}

TEST(LogLine, FlattensLineBreaks) {
  EXPECT_EQ(log::one_line("FATAL:  terminating connection\nDETAIL:  x\n"),
            "FATAL: terminating connection DETAIL: x");
  EXPECT_EQ(log::one_line("\t a \r\n b "), "a b");
  EXPECT_EQ(log::one_line(""), "");
}

TEST(Logger, AnApplicationsOwnLoggerReceivesTheEntries) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::drop(log::name);
  auto own = std::make_shared<spdlog::logger>(log::name, sink);
  own->set_pattern("%l %v");
  spdlog::register_logger(own);
  log::set_level(spdlog::level::info);
  log::info("worker {} started", "payments");
  log::debug("not shown");
  EXPECT_EQ(out.str(), "info worker payments started\n");
  EXPECT_EQ(log::logger(), own);
  spdlog::drop(log::name);
}

TEST(Logger, CreatedOnFirstUseWithTheEnvironmentsLevel) {
  spdlog::drop(log::name);
  scoped_env own{"CMDBUS_LOG_LEVEL", "critical"};
  auto created = log::logger();
  EXPECT_EQ(created->name(), log::name);
  EXPECT_EQ(created->level(), spdlog::level::critical);
  EXPECT_EQ(spdlog::get(log::name), created);
  spdlog::drop(log::name);
}
