// What a worker refuses before it touches the database: a handler
// registered twice for one domain and command type, and an invalid
// configuration.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "cmdbus/model/errors.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- registration -------------------------------------------------------------

TEST(WorkerRegistry, DuplicateHandlerRegistrationThrows) {
  handler_registry reg;
  reg.add("wk_dom_a", "Pay", null_result);
  EXPECT_THROW(reg.add("wk_dom_a", "Pay", null_result),
               handler_already_registered_error);
  // Same type in another domain, or another type: fine.
  EXPECT_NO_THROW(reg.add("wk_dom_b", "Pay", null_result));
  EXPECT_NO_THROW(reg.add("wk_dom_a", "Refund", null_result));
  try {
    reg.add("wk_dom_a", "Pay", null_result);
    FAIL() << "no exception";
  } catch (const command_bus_error& err) {
    EXPECT_NE(std::string{err.what()}.find("wk_dom_a/Pay"), std::string::npos)
      << err.what();
  }
  EXPECT_NE(reg.find("wk_dom_b", "Pay"), nullptr);
  EXPECT_EQ(reg.find("wk_dom_b", "Refund"), nullptr);
}

// -- configuration ------------------------------------------------------------

TEST(WorkerConfig, InvalidConfigurationIsRejectedByTheConstructor) {
  auto expect_invalid = [](config::worker_config cfg, const std::string& what) {
    try {
      worker w{cfg, handler_registry{}};
      ADD_FAILURE() << "no exception for " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string{e.what()}.find(what), std::string::npos)
        << e.what();
    }
  };
  auto no_domains = make_cfg({});
  expect_invalid(no_domains, "no domains");
  auto slow_statements = make_cfg({"wk_cfg"});
  slow_statements.visibility_timeout = 5s;
  slow_statements.statement_timeout = 5s;
  expect_invalid(slow_statements, "statement-timeout");
  auto zero = make_cfg({"wk_cfg"});
  zero.concurrency = 0;
  expect_invalid(zero, "concurrency");
  // A valid one constructs (no database access before start()).
  EXPECT_NO_THROW((worker{make_cfg({"wk_cfg"}), handler_registry{}}));
}
