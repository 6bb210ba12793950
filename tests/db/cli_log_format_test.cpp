// Logging for operators: --log-format json (or CMDBUS_LOG_FORMAT=json)
// makes every log line a JSON object; the worker prints progress lines only
// on a terminal or with --progress, each with a timestamp and a rate.

#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "tests/support/bus_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

namespace {

/// Runs cmdbus with the log settings of the environment cleared, then `env`.
test::process_result run(const std::vector<std::string>& args,
                         std::vector<std::string> env = {}) {
  env.insert(env.begin(),
             {"CMDBUS_LOG_LEVEL=", "SPDLOG_LEVEL=", "CMDBUS_LOG_FORMAT="});
  return test::run_cmdbus(args, env);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

/// A domain with one command that succeeds, for `cmdbus worker --tick`.
std::string domain_with_a_command() {
  test::bus_env env{1};
  auto domain = test::unique_name("logfmt");
  env.bus.send(
    test::make_req(domain, "Test", R"({"behavior": {"outcome": "success"}})"));
  return domain;
}

/// Expects every line of `err` (at least one) to be a JSON object with
/// time, level, logger and message.
void expect_json_lines(const std::string& err) {
  auto lines = lines_of(err);
  ASSERT_FALSE(lines.empty());
  for (auto& line : lines) {
    rapidjson::Document doc;
    doc.Parse(line.data(), line.size());
    ASSERT_FALSE(doc.HasParseError()) << line;
    ASSERT_TRUE(doc.IsObject()) << line;
    for (auto* key : {"time", "level", "logger", "message"})
      EXPECT_TRUE(doc.HasMember(key) && doc[key].IsString())
        << key << " in " << line;
    EXPECT_STREQ(doc["logger"].GetString(), "cmdbus") << line;
  }
}

const std::regex progress_line{
  R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ received \d+, completed \d+, .*, \d+\.\d completed/s$)"};

size_t progress_lines(const std::string& out) {
  size_t n = 0;
  for (auto& line : lines_of(out))
    n += std::regex_match(line, progress_line) ? 1 : 0;
  return n;
}

} // namespace

TEST(CliLogFormat, JsonOptionMakesEveryLogLineAJsonObject) {
  auto domain = domain_with_a_command();
  auto r = run({"worker", "--demo", "--tick", "--log-format", "json",
                "--domain", domain, "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_json_lines(r.err);
  EXPECT_NE(r.err.find("\"message\":\"worker started for 1 domain(s)"),
            std::string::npos)
    << r.err;
}

TEST(CliLogFormat, JsonBeforeTheCommandAndFromTheEnvironment) {
  auto domain = domain_with_a_command();
  auto r = run({"--log-format=json", "worker", "--demo", "--tick", "--domain",
                domain, "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_json_lines(r.err);
  domain = domain_with_a_command();
  r = run({"worker", "--demo", "--tick", "--domain", domain, "--dsn",
           test::dsn()},
          {"CMDBUS_LOG_FORMAT=json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_json_lines(r.err);
  // The option wins over the environment.
  domain = domain_with_a_command();
  r = run({"worker", "--demo", "--tick", "--log-format", "text", "--domain",
           domain, "--dsn", test::dsn()},
          {"CMDBUS_LOG_FORMAT=json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("{\"time\""), std::string::npos) << r.err;
}

TEST(CliLogFormat, JournalLinesHaveAPriorityAndNoTime) {
  auto domain = domain_with_a_command();
  auto r = run({"worker", "--demo", "--tick", "--log-format", "journal",
                "--domain", domain, "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = lines_of(r.err);
  ASSERT_FALSE(lines.empty());
  const std::regex journal_line{R"(^<[2-7]>\S.*$)"};
  const std::regex time{R"(\d\d:\d\d:\d\d)"};
  for (auto& line : lines) {
    EXPECT_TRUE(std::regex_match(line, journal_line)) << line;
    EXPECT_FALSE(std::regex_search(line, time)) << line;
  }
  EXPECT_NE(r.err.find("<6>worker started for 1 domain(s)"), std::string::npos)
    << r.err;
  // From the environment; debug lines have priority 7.
  domain = domain_with_a_command();
  r = run({"worker", "--demo", "--tick", "--log-level", "debug", "--domain",
           domain, "--dsn", test::dsn()},
          {"CMDBUS_LOG_FORMAT=journal"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("\n<7>"), std::string::npos) << r.err;
}

TEST(CliLogFormat, UnknownFormatIsAUsageErrorNamingTheChoices) {
  auto r = run({"worker", "--tick", "--log-format", "xml", "--domain", "d"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("unknown log format 'xml' (use text, json or journal)"),
            std::string::npos)
    << r.err;
  r = run({"queues", "--dsn", test::dsn()}, {"CMDBUS_LOG_FORMAT=xml"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("CMDBUS_LOG_FORMAT"), std::string::npos) << r.err;
  r = run({"queues", "--log-format"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--log-format needs a value (text, json or journal)"),
            std::string::npos)
    << r.err;
}

TEST(CliLogFormat, WorkerWithoutATerminalPrintsNoProgressLines) {
  auto domain = domain_with_a_command();
  auto r = run(
    {"worker", "--demo", "--tick", "--domain", domain, "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(progress_lines(r.out), 0u) << r.out;
  // Only the final counters.
  EXPECT_EQ(lines_of(r.out).size(), 1u) << r.out;
}

TEST(CliLogFormat, ProgressOptionForcesProgressLines) {
  auto domain = domain_with_a_command();
  auto r = run({"worker", "--demo", "--tick", "--progress", "--domain", domain,
                "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(progress_lines(r.out), 1u) << r.out;
  // --quiet keeps meaning off.
  domain = domain_with_a_command();
  r = run({"worker", "--demo", "--tick", "--progress", "--quiet", "--domain",
           domain, "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(progress_lines(r.out), 0u) << r.out;
}

TEST(CliLogFormat, HelpDocumentsTheOptions) {
  auto r = run({"--help"});
  EXPECT_NE(r.out.find("--log-format FORMAT"), std::string::npos) << r.out;
  r = run({"worker", "--help"});
  EXPECT_NE(r.out.find("--progress"), std::string::npos) << r.out;
}
