// The deterministic keys of the demo handler (`cmdbus worker`, command type
// `Test`): `transient_attempts` and `outcome` (apps/demo_handlers.hpp), run
// through the CLI in tick mode against the real database.

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

namespace {

struct expected {
  const char* behavior;
  int max_attempts;
  const char* status;
  int attempts;
  /// last_error_code of the final row; nullptr when none is expected.
  const char* error_code;
};

// One command per case; each reaches its final status within one tick
// because retries are due at once (--backoff 0).
const expected cases[] = {
  // Transient once, then success.
  {R"({"transient_attempts": 1})", 3, "COMPLETED", 2, "DEMO_TRANSIENT"},
  // Transient twice, then the fixed outcome on the third attempt.
  {R"({"transient_attempts": 2, "outcome": "business_rule"})", 3, "FAILED", 3,
   "DEMO_BUSINESS_RULE"},
  // More transient attempts than allowed: exhausted.
  {R"({"transient_attempts": 5})", 3, "IN_TROUBLESHOOTING_QUEUE", 3,
   "DEMO_TRANSIENT"},
  {R"({"outcome": "permanent"})", 3, "IN_TROUBLESHOOTING_QUEUE", 1,
   "DEMO_PERMANENT"},
  {R"({"outcome": "business_rule", "error_code": "LIMIT"})", 3, "FAILED", 1,
   "LIMIT"},
  // The fixed outcome wins over the percentages.
  {R"({"outcome": "success", "fail_permanent_pct": 100})", 3, "COMPLETED", 1,
   nullptr},
  {R"({"outcome": "maybe"})", 3, "IN_TROUBLESHOOTING_QUEUE", 1,
   "DEMO_BAD_BEHAVIOR"},
};

} // namespace

TEST(DemoHandler, TransientAttemptsAndFixedOutcomesAreDeterministic) {
  db::pool_options popts;
  popts.dsn = test::dsn();
  popts.max_size = 2;
  db::pool pool{popts};
  command_bus bus{pool};
  auto domain = test::unique_name("demo");
  std::vector<uuid> ids;
  for (auto& c : cases) {
    send_request req;
    req.domain = domain;
    req.command_type = "Test";
    req.command_id = uuid::random();
    req.data = json::parse(std::string{R"({"behavior": )"} + c.behavior + "}");
    req.max_attempts = c.max_attempts;
    bus.send(req);
    ids.push_back(req.command_id);
  }
  auto r = test::run_cmdbus({"worker", "--demo", "--tick", "--quiet",
                             "--domain", domain, "--dsn", test::dsn(),
                             "--backoff", "0"});
  // Exit 5: some cases end in the troubleshooting queue.
  ASSERT_EQ(r.exit_code, 5) << r.err;
  auto conn = test::connect();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto row = conn.query("SELECT status, attempts, last_error_code FROM "
                          "commandbus.command WHERE domain = $1 AND "
                          "command_id = $2",
                          domain, ids[i].to_string());
    ASSERT_EQ(row.rows(), 1);
    const auto& c = cases[i];
    EXPECT_EQ(row.text(0, 0), c.status) << c.behavior;
    EXPECT_EQ(row.int64(0, 1), c.attempts) << c.behavior;
    EXPECT_EQ(row.opt_text(0, 2),
              c.error_code ? std::optional<std::string>{c.error_code}
                           : std::nullopt)
      << c.behavior;
  }
}
