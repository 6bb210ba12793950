// Workflow definitions alone, without a database or an actor system: the
// example order process type (tests/unit/process_workflow_fixture.hpp)
// through its typed spec and through the type-erased interface the runtime
// uses, and the checks of `workflow_definition`'s constructor.

#include "cmdbus/process/workflow.hpp"

#include <gtest/gtest.h>

#include <string>

#include "cmdbus/model/wire.hpp"
#include "tests/unit/process_workflow_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::process_test;

namespace {

reply success(const std::string& result = "null") {
  reply r;
  r.command_id = uuid::random();
  r.result = json::parse(result);
  return r;
}

// -- the example, typed -------------------------------------------------------

TEST(process_workflow, typed_spec_runs_three_steps) {
  auto spec = order_spec();
  auto s = spec.initial_state(order_input("o-7", 40));
  EXPECT_EQ(s.order_id, "o-7");
  EXPECT_EQ(s.amount, 40);
  auto step = spec.first_step(s);
  EXPECT_EQ(step, order_step::reserve);
  EXPECT_EQ(spec.command_for(step, s).command_type, "ReserveStock");
  spec.update_state(s, step, success(R"({"reservation_id":"r-1"})"));
  EXPECT_EQ(s.reservation, "r-1");
  auto next = spec.next_step(step, success(), s);
  ASSERT_TRUE(next);
  EXPECT_EQ(*next, order_step::debit);
  spec.update_state(s, *next, success());
  EXPECT_TRUE(s.debited);
  next = spec.next_step(*next, success(), s);
  ASSERT_TRUE(next);
  EXPECT_EQ(*next, order_step::notify);
  EXPECT_FALSE(spec.next_step(*next, success(), s));
}

// -- the example, type-erased -------------------------------------------------

TEST(process_workflow, type_erased_interface_uses_stored_names) {
  const workflow& w = order_workflow();
  EXPECT_EQ(w.process_type(), "OrderFulfilment");
  auto state = w.initial_state(order_input("o-1", 250));
  EXPECT_EQ(state.text(), R"({"order_id":"o-1","amount":250,"reservation":)"
                          R"(null,"debited":false,"notified":false,)"
                          R"("last_error":null})");
  EXPECT_EQ(w.first_step(state), "Reserve");
  auto cmd = w.command_for("Reserve", state);
  EXPECT_EQ(cmd.command_type, "ReserveStock");
  EXPECT_EQ(cmd.data.text(), R"({"order_id":"o-1","amount":250})");
  state = w.update_state(state, "Reserve",
                         success(R"({"reservation_id":"r-9"})"));
  EXPECT_EQ(from_json(state).reservation, "r-9");
  EXPECT_EQ(w.next_step("Reserve", success(), state), "Debit");
  EXPECT_EQ(w.next_step("Debit", success(), state), "Notify");
  EXPECT_EQ(w.next_step("Notify", success(), state), std::nullopt);
  EXPECT_EQ(w.command_for("Release", state).data.text(),
            R"({"order_id":"o-1","reservation_id":"r-9"})");
}

TEST(process_workflow, compensations_by_name) {
  const workflow& w = order_workflow();
  EXPECT_EQ(w.compensation_for("Reserve"), "Release");
  EXPECT_EQ(w.compensation_for("Debit"), "Refund");
  EXPECT_EQ(w.compensation_for("Notify"), std::nullopt);
  EXPECT_EQ(w.compensation_for("Release"), std::nullopt);
}

TEST(process_workflow, failed_reply_updates_the_state) {
  const workflow& w = order_workflow();
  auto r = wire::decode_reply(
    R"({"command_id":"6f1c0a52-3c1d-4a8e-9a57-0c0f5e3f2b11",)"
    R"("correlation_id":null,"outcome":"FAILED","result":{"error_code":)"
    R"("NO_FUNDS","error_message":"insufficient funds","error_details":{}}})");
  auto state = w.update_state(w.initial_state(order_input()), "Debit", r);
  EXPECT_EQ(from_json(state).last_error, "NO_FUNDS");
}

TEST(process_workflow, bad_input_throws) {
  const workflow& w = order_workflow();
  EXPECT_THROW(w.initial_state(json::parse(R"({"order_id":"o-1"})")),
               std::invalid_argument);
  EXPECT_THROW(w.initial_state(json::parse("[]")), std::invalid_argument);
}

TEST(process_workflow, unknown_step_name_throws) {
  const auto& w = order_workflow();
  auto state = w.initial_state(order_input());
  EXPECT_THROW(w.command_for("Ship", state), std::invalid_argument);
  EXPECT_THROW(w.step_of("reserve"), std::invalid_argument);
  EXPECT_EQ(w.step_of("Refund"), order_step::refund);
  EXPECT_EQ(w.name_of(order_step::notify), "Notify");
}

// -- construction checks ------------------------------------------------------

using order_definition = workflow_definition<order_state, order_step>;

TEST(process_workflow, rejects_a_repeated_step_name) {
  auto spec = order_spec();
  spec.steps[1].second = "Reserve";
  EXPECT_THROW(order_definition{spec}, std::invalid_argument);
}

TEST(process_workflow, rejects_an_empty_step_name) {
  auto spec = order_spec();
  spec.steps[2].second = "";
  EXPECT_THROW(order_definition{spec}, std::invalid_argument);
}

TEST(process_workflow, rejects_a_step_listed_twice) {
  auto spec = order_spec();
  spec.steps.push_back({order_step::debit, "DebitAgain"});
  EXPECT_THROW(order_definition{spec}, std::invalid_argument);
}

TEST(process_workflow, rejects_an_unlisted_compensation) {
  auto spec = order_spec();
  spec.steps.pop_back(); // refund
  EXPECT_THROW(order_definition{spec}, std::invalid_argument);
}

TEST(process_workflow, rejects_missing_functions_and_type) {
  auto spec = order_spec();
  spec.next_step = nullptr;
  EXPECT_THROW(order_definition{spec}, std::invalid_argument);
  spec = order_spec();
  spec.process_type.clear();
  EXPECT_THROW(order_definition{spec}, std::invalid_argument);
  spec = order_spec();
  spec.steps.clear();
  spec.compensation_for.clear();
  EXPECT_THROW(order_definition{spec}, std::invalid_argument);
}

TEST(process_workflow, compensation_is_optional) {
  auto spec = order_spec();
  spec.compensation_for.clear();
  order_definition w{spec};
  EXPECT_EQ(w.compensation_for("Reserve"), std::nullopt);
}

} // namespace
