// The sample configuration shipped for operators (deploy/worker.ini): it
// loads, is valid once a DSN comes from the environment, and mentions every
// setting a worker file can hold, so that it stays the complete reference.

#include "cmdbus/config/worker_config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "tests/support/config_fakes.hpp"

using namespace cmdbus::config;
using cmdbus::test::read_file;
using namespace std::chrono_literals;

namespace {

const std::string sample_path = CMDBUS_SOURCE_DIR "/deploy/worker.ini";

} // namespace

TEST(ConfigSample, loads_and_is_valid_with_a_dsn) {
  worker_config cfg;
  apply_ini(cfg, read_file(sample_path), "worker.ini");
  EXPECT_EQ(cfg.dsn, "") << "the sample keeps the password out: no dsn";
  cfg.dsn = "host=db.invalid dbname=app";
  auto problems = validate(cfg);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"payments"}));
  // deploy/cmdbus-worker.service's TimeoutStopSec is chosen above this.
  EXPECT_EQ(cfg.shutdown_timeout, 30s);
  auto http = parse_http_address(cfg.http);
  EXPECT_EQ(http.host, "127.0.0.1");
  EXPECT_EQ(http.port, 9464);
}

TEST(ConfigSample, loads_through_config_flag_and_environment) {
  auto env = [](const char* name) -> std::optional<std::string> {
    if (std::string{name} == "CMDBUS_DSN")
      return "host=db.invalid dbname=app";
    return std::nullopt;
  };
  auto cfg = load({"--config", sample_path}, env);
  EXPECT_EQ(cfg.dsn, "host=db.invalid dbname=app");
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"payments"}));
}

TEST(ConfigSample, mentions_every_setting) {
  // describe() renders every key a file may set; the sample names each one,
  // set or commented out (only `tick` is a command-line matter).
  auto sample = read_file(sample_path);
  std::istringstream described{describe(worker_config{})};
  std::string line;
  while (std::getline(described, line)) {
    auto eq = line.find(" = ");
    if (eq == std::string::npos)
      continue;
    auto key = line.substr(0, eq);
    if (key == "tick")
      continue;
    bool set = sample.find("\n" + key + " = ") != std::string::npos;
    bool commented = sample.find("\n; " + key + " = ") != std::string::npos;
    EXPECT_TRUE(set || commented) << key << " is not in deploy/worker.ini";
  }
}
