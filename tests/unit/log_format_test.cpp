// The JSON format of the "cmdbus" logger: one object per line that parses
// back with the right fields, whatever the message holds.

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <vector>
#include <string>

#include <rapidjson/document.h>
#include <spdlog/sinks/ostream_sink.h>

#include "cmdbus/model/log.hpp"

using namespace cmdbus;

namespace {

rapidjson::Document parse(const std::string& line) {
  rapidjson::Document doc;
  doc.Parse(line.data(), line.size());
  EXPECT_FALSE(doc.HasParseError()) << line;
  EXPECT_TRUE(doc.IsObject()) << line;
  return doc;
}

std::string field(const rapidjson::Document& doc, const char* name) {
  auto it = doc.FindMember(name);
  if (it == doc.MemberEnd() || !it->value.IsString())
    return "<missing>";
  return {it->value.GetString(), it->value.GetStringLength()};
}

std::string line_of(std::string_view message, const log::origin& from = {}) {
  return log::json_line(
    std::chrono::system_clock::time_point{
      std::chrono::microseconds{1700000000123456}},
    spdlog::level::warn, "cmdbus", from, message);
}

} // namespace

TEST(LogFormat, JsonLineHasTheFields) {
  auto line = line_of("started", {"poller/payments", "payments"});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  auto doc = parse(line);
  EXPECT_EQ(field(doc, "time"), "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(field(doc, "level"), "warning");
  EXPECT_EQ(field(doc, "logger"), "cmdbus");
  EXPECT_EQ(field(doc, "actor"), "poller/payments");
  EXPECT_EQ(field(doc, "domain"), "payments");
  EXPECT_EQ(field(doc, "message"), "started");
}

TEST(LogFormat, NoOriginLeavesActorAndDomainOut) {
  auto doc = parse(line_of("plain"));
  EXPECT_FALSE(doc.HasMember("actor"));
  EXPECT_FALSE(doc.HasMember("domain"));
}

TEST(LogFormat, AwkwardMessagesStayOneValidLine) {
  std::string control{"a\x01\x1f\x7f"};
  std::string long_text(100000, 'x');
  for (std::string message :
       {std::string{"say \"hi\" \\ back\\"}, std::string{"two\nlines\r\ttab"},
        control, long_text, std::string{"\xC3\xA9t\xC3\xA9"}}) {
    auto line = line_of(message);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    EXPECT_EQ(field(parse(line), "message"), message);
  }
}

TEST(LogFormat, InvalidUtf8BecomesReplacementCharacters) {
  std::string bad{"a\xff"
                  "b\xC3"
                  "c\xED\xA0\x80"
                  "d"};
  auto line = line_of(bad);
  auto doc = parse(line);
  EXPECT_EQ(field(doc, "message"), "a\xEF\xBF\xBD"
                                   "b\xEF\xBF\xBD"
                                   "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                                   "d");
}

TEST(LogFormat, ParseFormatNamesTheChoices) {
  EXPECT_EQ(log::parse_format("JSON"), log::format::json);
  EXPECT_EQ(log::parse_format("text"), log::format::text);
  EXPECT_EQ(log::parse_format("Journal"), log::format::journal);
  try {
    log::parse_format("xml");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string{e.what()}.find("text, json or journal"),
              std::string::npos);
  }
}

TEST(LogFormat, JournalLineHasThePriorityAndTheOriginWithoutATime) {
  using spdlog::level::level_enum;
  EXPECT_EQ(log::journal_line(level_enum::info, {"poller", "payments"},
                              "reading"),
            "<6>[poller/payments] reading");
  EXPECT_EQ(log::journal_line(level_enum::warn, {"worker", ""}, "slow"),
            "<4>[worker] slow");
  EXPECT_EQ(log::journal_line(level_enum::err, {}, "down"), "<3>down");
  EXPECT_EQ(log::journal_line(level_enum::critical, {}, "x"), "<2>x");
  EXPECT_EQ(log::journal_line(level_enum::debug, {}, "x"), "<7>x");
  EXPECT_EQ(log::journal_line(level_enum::trace, {}, "x"), "<7>x");
  // One entry, one line: journald would take a line break for two entries.
  EXPECT_EQ(log::journal_line(level_enum::err, {},
                              "server closed\n  the connection"),
            "<3>server closed the connection");
}

// Runs `log_some` with the "cmdbus" logger writing JSON lines into a
// string (its sinks, level and format restored afterwards) and returns the
// lines written.
template <class F>
std::vector<std::string> json_lines_of(F log_some) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto logger = log::logger();
  auto sinks = logger->sinks();
  auto level = logger->level();
  logger->sinks() = {sink};
  log::set_format(log::format::json);
  logger->set_level(spdlog::level::info);
  log_some();
  log::set_format(log::format::text);
  logger->set_level(level);
  logger->sinks() = sinks;
  std::vector<std::string> lines;
  std::istringstream in{out.str()};
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

TEST(LogFormat, LoggerWritesJsonWithTheOrigin) {
  auto lines = json_lines_of([] {
    log::log_from({"poller/orders", "orders"}, spdlog::level::info, "got {}",
                  "it");
    log::info("after");
  });
  ASSERT_EQ(lines.size(), 2u);
  auto a = parse(lines[0]);
  EXPECT_EQ(field(a, "actor"), "poller/orders");
  EXPECT_EQ(field(a, "domain"), "orders");
  EXPECT_EQ(field(a, "message"), "got it");
  EXPECT_EQ(field(a, "level"), "info");
  auto b = parse(lines[1]);
  EXPECT_FALSE(b.HasMember("actor"));
  EXPECT_EQ(field(b, "message"), "after");
}

TEST(LogFormat, AnActorsInstanceNameGivesItsFields) {
  auto o = log::origin_of("poller/payments");
  EXPECT_EQ(o.actor, "poller");
  EXPECT_EQ(o.domain, "payments");
  o = log::origin_of("batch-counter");
  EXPECT_EQ(o.actor, "batch-counter");
  EXPECT_EQ(o.domain, "");
  auto lines = json_lines_of([] {
    log::from("completion/orders").warn("{} cannot use the database", "x");
    log::from(log::origin{"health", "orders"})
      .error("domain {} is CRITICAL", "orders");
  });
  ASSERT_EQ(lines.size(), 2u);
  auto a = parse(lines[0]);
  EXPECT_EQ(field(a, "actor"), "completion");
  EXPECT_EQ(field(a, "domain"), "orders");
  EXPECT_EQ(field(a, "level"), "warning");
  EXPECT_EQ(field(a, "message"), "x cannot use the database");
  auto b = parse(lines[1]);
  EXPECT_EQ(field(b, "actor"), "health");
  EXPECT_EQ(field(b, "level"), "error");
}
