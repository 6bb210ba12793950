// An application actor registered as a command handler: its outcomes map
// onto the handler outcomes, and an unavailable actor is a transient
// failure. Uses a real (threaded) actor system: the registry blocks.

#define CAF_SUITE actors.actor_handler
#include "cmdbus/actors/actor_handler.hpp"

#include <caf/all.hpp>
#include <caf/test/dsl.hpp>

using namespace cmdbus;

namespace {

command_handler_actor::behavior_type app_handler() {
  return {
    [](atom::handle, const received_command& rc) -> outcome {
      outcome out;
      if (rc.cmd.command_type == "Pay") {
        out.result = json::parse(R"({"paid": )" + std::to_string(rc.attempt)
                                 + "}");
      } else {
        out.kind = outcome_kind::business_rule;
        out.error_code = "CLOSED";
        out.error_message = "account closed";
      }
      return out;
    },
  };
}

received_command make_rc(const std::string& type) {
  received_command rc;
  rc.cmd.domain = "d";
  rc.cmd.command_type = type;
  rc.cmd.command_id = uuid::random();
  rc.attempt = 2;
  rc.max_attempts = 3;
  rc.msg_id = 7;
  return rc;
}

outcome run(const handler_registry& reg, const received_command& rc) {
  handler_context ctx{std::make_shared<const received_command>(rc),
                      [](std::chrono::seconds) {},
                      std::make_shared<std::atomic<bool>>(false)};
  return reg.run(rc, ctx);
}

} // namespace

CAF_TEST(an actor handles commands through the registry) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto hdl = sys.spawn(app_handler);
  handler_registry reg;
  add_actor_handler(reg, "d", "Pay", sys, hdl, std::chrono::seconds{5});
  add_actor_handler(reg, "d", "Close", sys, hdl, std::chrono::seconds{5});
  auto ok = run(reg, make_rc("Pay"));
  CAF_CHECK(ok.kind == outcome_kind::success);
  CAF_CHECK_EQUAL(ok.result.text(), R"({"paid":2})");
  auto failed = run(reg, make_rc("Close"));
  CAF_CHECK(failed.kind == outcome_kind::business_rule);
  CAF_CHECK_EQUAL(failed.error_code, "CLOSED");
  CAF_CHECK_EQUAL(failed.error_message, "account closed");
  bool duplicate_rejected = false;
  try {
    add_actor_handler(reg, "d", "Pay", sys, hdl, std::chrono::seconds{5});
  } catch (const handler_already_registered_error&) {
    duplicate_rejected = true;
  }
  CAF_CHECK(duplicate_rejected);
  caf::anon_send_exit(hdl, caf::exit_reason::user_shutdown);
  // A dead actor is a transient failure, never a crash.
  caf::scoped_actor waiter{sys};
  waiter->wait_for(hdl);
  auto gone = run(reg, make_rc("Pay"));
  CAF_CHECK(gone.kind == outcome_kind::transient);
  CAF_CHECK_EQUAL(gone.error_code, "HANDLER_ACTOR_UNAVAILABLE");
}
