// The log level of the `cmdbus` tool: --log-level on any command, else
// CMDBUS_LOG_LEVEL, else SPDLOG_LEVEL, else info for `worker` and warn for
// the other commands. An unknown level is a usage error (exit code 1) that
// names the choices. The log goes to stderr.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

namespace {

/// Runs cmdbus with the log level of the environment cleared, then `env`.
test::process_result run(const std::vector<std::string>& args,
                         std::vector<std::string> env = {}) {
  env.insert(env.begin(), {"CMDBUS_LOG_LEVEL=", "SPDLOG_LEVEL="});
  return test::run_cmdbus(args, env);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The line db::connection logs at debug level when it connects.
constexpr const char* debug_line = "connected to ";

/// The line the worker logs at info level when it starts.
constexpr const char* start_line = "worker started for 1 domain(s)";

/// A domain with one pending command, for `cmdbus worker --tick`.
std::string domain_with_a_command() {
  db::pool_options popts;
  popts.dsn = test::dsn();
  popts.max_size = 1;
  db::pool pool{popts};
  command_bus bus{pool};
  auto domain = test::unique_name("loglvl");
  send_request req;
  req.domain = domain;
  req.command_type = "Test";
  req.command_id = uuid::random();
  req.data = json::parse(R"({"behavior": {"outcome": "success"}})");
  bus.send(req);
  return domain;
}

} // namespace

TEST(CliLogLevel, OtherCommandsLogWarningsOnlyByDefault) {
  auto r = run({"queues", "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, debug_line)) << r.err;
}

TEST(CliLogLevel, OptionSetsTheLevelBeforeOrAfterTheCommand) {
  auto r = run({"queues", "--dsn", test::dsn(), "--log-level", "debug"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, debug_line)) << r.err;
  r = run({"--log-level=debug", "queues", "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, debug_line)) << r.err;
  // The last one wins, and wins over the environment.
  r = run({"queues", "--log-level", "debug", "--dsn", test::dsn(),
           "--log-level", "warn"},
          {"CMDBUS_LOG_LEVEL=debug"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, debug_line)) << r.err;
}

TEST(CliLogLevel, EnvironmentSetsTheLevel) {
  auto r = run({"queues", "--dsn", test::dsn()}, {"CMDBUS_LOG_LEVEL=debug"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, debug_line)) << r.err;
  r = run({"queues", "--dsn", test::dsn()}, {"SPDLOG_LEVEL=warn,cmdbus=debug"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, debug_line)) << r.err;
  // CMDBUS_LOG_LEVEL wins over SPDLOG_LEVEL.
  r = run({"queues", "--dsn", test::dsn()},
          {"CMDBUS_LOG_LEVEL=warn", "SPDLOG_LEVEL=debug"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, debug_line)) << r.err;
}

TEST(CliLogLevel, UnknownLevelIsAUsageErrorNamingTheChoices) {
  const char* choices = "trace, debug, info, warn, error, critical or off";
  auto r = run({"queues", "--log-level", "loud", "--dsn", test::dsn()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "unknown log level 'loud'")) << r.err;
  EXPECT_TRUE(contains(r.err, choices)) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = run({"worker", "--log-level=loud", "--domain", "d"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, choices)) << r.err;
  r = run({"queues", "--dsn", test::dsn()}, {"CMDBUS_LOG_LEVEL=loud"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "CMDBUS_LOG_LEVEL")) << r.err;
  EXPECT_TRUE(contains(r.err, choices)) << r.err;
  r = run({"migrate", "--log-level"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--log-level needs a value")) << r.err;
}

TEST(CliLogLevel, HelpDocumentsTheOption) {
  auto r = run({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "--log-level LEVEL")) << r.out;
  r = run({"worker", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "--log-level LEVEL")) << r.out;
  EXPECT_TRUE(contains(r.out, "CMDBUS_LOG_LEVEL")) << r.out;
}

TEST(CliLogLevel, WorkerShowsItsInfoLinesByDefault) {
  auto domain = domain_with_a_command();
  auto r = run({"worker", "--demo", "--tick", "--quiet", "--domain", domain,
                "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, start_line)) << r.err;
  EXPECT_FALSE(contains(r.err, debug_line)) << r.err;
}

TEST(CliLogLevel, WorkerHidesItsInfoLinesAtWarn) {
  auto domain = domain_with_a_command();
  auto r = run({"worker", "--demo", "--tick", "--quiet", "--domain", domain,
                "--dsn", test::dsn(), "--log-level", "warn"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, start_line)) << r.err;
  r = run({"worker", "--demo", "--tick", "--quiet", "--domain", domain, "--dsn",
           test::dsn()},
          {"CMDBUS_LOG_LEVEL=warn"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, start_line)) << r.err;
}
