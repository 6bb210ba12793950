// The demo process type DemoOrder (apps/demo_workflows.hpp) alone, without a
// database or an actor system: its input checks, the `Test` commands each
// step sends (the behavior the demo handler follows), how replies update
// the state, and the plan of each path through the type-erased interface.

#include "apps/demo_workflows.hpp"

#include <gtest/gtest.h>

#include <string>

#include <rapidjson/document.h>

using namespace cmdbus;
using namespace cmdbus::demo;

namespace {

reply success(const std::string& result = "null") {
  reply r;
  r.command_id = uuid::random();
  r.result = json::parse(result);
  return r;
}

reply failed(const std::string& code) {
  reply r;
  r.command_id = uuid::random();
  r.outcome = reply_outcome::failed;
  r.error_code = code;
  r.error_message = "failed";
  return r;
}

rapidjson::Document doc_of(const json& x) {
  rapidjson::Document d;
  d.Parse(x.text().c_str());
  return d;
}

// The `behavior.outcome` a step's command asks the demo handler for.
std::string outcome_of(const step_command& c) {
  auto d = doc_of(c.data);
  return d["behavior"]["outcome"].GetString();
}

const workflow& demo_order() {
  static auto w = demo_order_workflow();
  return *w;
}

} // namespace

TEST(demo_workflow, input_is_checked) {
  auto s = initial_order(json::parse(R"({"order_id": "o-1"})"));
  EXPECT_EQ(s.order_id, "o-1");
  EXPECT_EQ(s.charge, charge_mode::ok);
  EXPECT_EQ(s.amount, 100);
  s = initial_order(
    json::parse(R"({"order_id": "o-2", "charge": "broken", "amount": 7})"));
  EXPECT_EQ(s.charge, charge_mode::broken);
  EXPECT_EQ(s.amount, 7);
  for (auto bad :
       {R"([])", R"({})", R"({"order_id": ""})", R"({"order_id": 5})",
        R"({"order_id": "o", "charge": "maybe"})",
        R"({"order_id": "o", "charge": 1})",
        R"({"order_id": "o", "amount": 0})",
        R"({"order_id": "o", "amount": "ten"})"})
    EXPECT_THROW(initial_order(json::parse(bad)), std::invalid_argument) << bad;
}

TEST(demo_workflow, state_round_trips_through_json) {
  order_state s;
  s.order_id = "o-9";
  s.amount = 42;
  s.charge = charge_mode::declined;
  s.reservation_id = "R-o-9";
  s.last_error = "CARD_DECLINED";
  auto x = to_json(s);
  EXPECT_EQ(x.text(), R"({"order_id":"o-9","amount":42,"charge":"declined",)"
                      R"("reservation_id":"R-o-9","payment_id":null,)"
                      R"("shipped":false,"last_error":"CARD_DECLINED"})");
  auto back = order_from_json(x);
  EXPECT_EQ(back.order_id, "o-9");
  EXPECT_EQ(back.amount, 42);
  EXPECT_EQ(back.charge, charge_mode::declined);
  EXPECT_EQ(back.reservation_id, "R-o-9");
  EXPECT_FALSE(back.payment_id);
  EXPECT_FALSE(back.shipped);
  EXPECT_EQ(back.last_error, "CARD_DECLINED");
  EXPECT_EQ(to_json(back).text(), x.text());
}

TEST(demo_workflow, every_step_sends_a_test_command_with_its_behavior) {
  auto ok = initial_order(json::parse(R"({"order_id": "o-1"})"));
  for (auto step : {order_step::reserve, order_step::charge, order_step::ship,
                    order_step::release, order_step::refund}) {
    auto c = order_command(step, ok);
    EXPECT_EQ(c.command_type, "Test");
    EXPECT_EQ(outcome_of(c), "success");
    EXPECT_EQ(std::string{doc_of(c.data)["order_id"].GetString()}, "o-1");
  }
  auto reserve = doc_of(order_command(order_step::reserve, ok).data);
  EXPECT_EQ(std::string{reserve["step"].GetString()}, "Reserve");
  EXPECT_EQ(
    std::string{reserve["behavior"]["result"]["reservation_id"].GetString()},
    "R-o-1");

  auto declined = initial_order(
    json::parse(R"({"order_id": "o-2", "charge": "declined"})"));
  auto c = order_command(order_step::charge, declined);
  EXPECT_EQ(outcome_of(c), "business_rule");
  EXPECT_EQ(std::string{doc_of(c.data)["behavior"]["error_code"].GetString()},
            "CARD_DECLINED");
  EXPECT_EQ(outcome_of(order_command(order_step::reserve, declined)),
            "success");

  auto broken = initial_order(
    json::parse(R"({"order_id": "o-3", "charge": "broken"})"));
  EXPECT_EQ(outcome_of(order_command(order_step::charge, broken)), "permanent");
}

TEST(demo_workflow, the_ok_path_runs_three_steps) {
  const auto& w = demo_order();
  EXPECT_EQ(w.process_type(), "DemoOrder");
  auto state = w.initial_state(json::parse(R"({"order_id": "o-1"})"));
  auto step = w.first_step(state);
  EXPECT_EQ(step, "Reserve");
  state = w.update_state(state, step, success(R"({"reservation_id": "R-1"})"));
  EXPECT_EQ(order_from_json(state).reservation_id, "R-1");
  auto next = w.next_step(step, success(), state);
  ASSERT_TRUE(next);
  EXPECT_EQ(*next, "Charge");
  state = w.update_state(state, *next, success(R"({"payment_id": "P-1"})"));
  EXPECT_EQ(order_from_json(state).payment_id, "P-1");
  next = w.next_step(*next, success(), state);
  ASSERT_TRUE(next);
  EXPECT_EQ(*next, "Ship");
  state = w.update_state(state, *next, success(R"({"tracking_id": "T-1"})"));
  EXPECT_TRUE(order_from_json(state).shipped);
  EXPECT_FALSE(w.next_step(*next, success(), state));
}

TEST(demo_workflow, compensations_undo_reserve_and_charge) {
  const auto& w = demo_order();
  EXPECT_EQ(w.compensation_for("Reserve"), "Release");
  EXPECT_EQ(w.compensation_for("Charge"), "Refund");
  EXPECT_FALSE(w.compensation_for("Ship"));
  EXPECT_FALSE(w.compensation_for("Release"));
  EXPECT_FALSE(w.compensation_for("Refund"));

  // A declined charge: its error is kept, the release clears the
  // reservation, a refund the payment.
  auto state = w.initial_state(
    json::parse(R"({"order_id": "o-2", "charge": "declined"})"));
  state = w.update_state(state, "Reserve",
                         success(R"({"reservation_id": "R-2"})"));
  state = w.update_state(state, "Charge", failed("CARD_DECLINED"));
  auto s = order_from_json(state);
  EXPECT_EQ(s.last_error, "CARD_DECLINED");
  EXPECT_FALSE(s.payment_id);
  state = w.update_state(state, "Release", success());
  EXPECT_FALSE(order_from_json(state).reservation_id);
  state = w.update_state(state, "Charge", success(R"({"payment_id": "P"})"));
  state = w.update_state(state, "Refund", success());
  EXPECT_FALSE(order_from_json(state).payment_id);
}

TEST(demo_workflow, registers_per_domain) {
  process_registry r;
  register_demo_workflows(r, "orders");
  register_demo_workflows(r, "shop");
  ASSERT_NE(r.find("orders", "DemoOrder"), nullptr);
  ASSERT_NE(r.find("shop", "DemoOrder"), nullptr);
  EXPECT_EQ(r.find("other", "DemoOrder"), nullptr);
  EXPECT_EQ(r.types("orders"), std::vector<std::string>{"DemoOrder"});
  EXPECT_THROW(register_demo_workflows(r, "orders"), duplicate_workflow_error);
}
