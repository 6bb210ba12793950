#include "apps/demo_workflows.hpp"

#include <stdexcept>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/model/types.hpp"

namespace cmdbus::demo {

namespace {

using writer = rapidjson::Writer<rapidjson::StringBuffer>;

// Writes a JSON object with `fill(writer)`.
template <class F>
json object(F fill) {
  rapidjson::StringBuffer buf;
  writer w{buf};
  w.StartObject();
  fill(w);
  w.EndObject();
  return json::parse(std::string{buf.GetString(), buf.GetSize()});
}

rapidjson::Document parse(const json& x) {
  rapidjson::Document doc;
  doc.Parse(x.text().c_str());
  return doc;
}

void key_string(writer& w, const char* key, const std::string& x) {
  w.Key(key);
  w.String(x.c_str(), static_cast<rapidjson::SizeType>(x.size()));
}

void key_optional(writer& w, const char* key,
                  const std::optional<std::string>& x) {
  if (x) {
    key_string(w, key, *x);
  } else {
    w.Key(key);
    w.Null();
  }
}

std::optional<std::string> optional_string(const rapidjson::Value& obj,
                                           const char* key) {
  auto it = obj.FindMember(key);
  if (it == obj.MemberEnd() || !it->value.IsString())
    return std::nullopt;
  return std::string{it->value.GetString(), it->value.GetStringLength()};
}

const char* name_of(charge_mode x) {
  switch (x) {
    case charge_mode::ok: return "ok";
    case charge_mode::declined: return "declined";
    case charge_mode::broken: return "broken";
  }
  return "ok";
}

std::optional<charge_mode> parse_charge(const std::string& x) {
  if (x == "ok")
    return charge_mode::ok;
  if (x == "declined")
    return charge_mode::declined;
  if (x == "broken")
    return charge_mode::broken;
  return std::nullopt;
}

// The demo handler's `behavior` for a step that succeeds with `result`.
void succeed(writer& w, const char* result_key, const std::string& value) {
  w.Key("behavior");
  w.StartObject();
  key_string(w, "outcome", "success");
  w.Key("result");
  w.StartObject();
  key_string(w, result_key, value);
  w.EndObject();
  w.EndObject();
}

// The `behavior` of the Charge step.
void charge_behavior(writer& w, const order_state& s) {
  switch (s.charge) {
    case charge_mode::ok: succeed(w, "payment_id", "P-" + s.order_id); return;
    case charge_mode::declined:
      w.Key("behavior");
      w.StartObject();
      key_string(w, "outcome", "business_rule");
      key_string(w, "error_code", "CARD_DECLINED");
      key_string(w, "error_message", "the card was declined");
      w.EndObject();
      return;
    case charge_mode::broken:
      w.Key("behavior");
      w.StartObject();
      key_string(w, "outcome", "permanent");
      key_string(w, "error_code", "PAYMENT_GATEWAY_ERROR");
      key_string(w, "error_message", "the payment gateway rejected the call");
      w.EndObject();
      return;
  }
}

void update(order_state& s, order_step step, const reply& r) {
  if (r.outcome == reply_outcome::failed) {
    s.last_error = r.error_code;
    return;
  }
  auto result = parse(r.result);
  auto from_result = [&](const char* key) {
    return result.IsObject() ? optional_string(result, key) : std::nullopt;
  };
  switch (step) {
    case order_step::reserve:
      s.reservation_id = from_result("reservation_id").value_or("");
      break;
    case order_step::charge:
      s.payment_id = from_result("payment_id").value_or("");
      break;
    case order_step::ship: s.shipped = true; break;
    case order_step::release: s.reservation_id.reset(); break;
    case order_step::refund: s.payment_id.reset(); break;
  }
}

std::optional<order_step> next(order_step step, const reply&,
                               const order_state&) {
  switch (step) {
    case order_step::reserve: return order_step::charge;
    case order_step::charge: return order_step::ship;
    default: return std::nullopt;
  }
}

} // namespace

json to_json(const order_state& s) {
  return object([&](writer& w) {
    key_string(w, "order_id", s.order_id);
    w.Key("amount");
    w.Int64(s.amount);
    key_string(w, "charge", name_of(s.charge));
    key_optional(w, "reservation_id", s.reservation_id);
    key_optional(w, "payment_id", s.payment_id);
    w.Key("shipped");
    w.Bool(s.shipped);
    key_optional(w, "last_error", s.last_error);
  });
}

order_state order_from_json(const json& x) {
  auto doc = parse(x);
  if (!doc.IsObject() || !doc.HasMember("order_id")
      || !doc["order_id"].IsString() || !doc.HasMember("amount")
      || !doc["amount"].IsInt64())
    throw std::invalid_argument("DemoOrder: not a stored DemoOrder state");
  order_state s;
  s.order_id = doc["order_id"].GetString();
  s.amount = doc["amount"].GetInt64();
  s.charge = parse_charge(optional_string(doc, "charge").value_or("ok"))
               .value_or(charge_mode::ok);
  s.reservation_id = optional_string(doc, "reservation_id");
  s.payment_id = optional_string(doc, "payment_id");
  s.shipped = doc.HasMember("shipped") && doc["shipped"].IsBool()
              && doc["shipped"].GetBool();
  s.last_error = optional_string(doc, "last_error");
  return s;
}

order_state initial_order(const json& input) {
  auto doc = parse(input);
  if (!doc.IsObject())
    throw std::invalid_argument("DemoOrder: the input must be an object");
  auto id = optional_string(doc, "order_id");
  if (!id || id->empty())
    throw std::invalid_argument(
      "DemoOrder: the input needs \"order_id\" (a non-empty string)");
  order_state s;
  s.order_id = *id;
  if (doc.HasMember("charge")) {
    auto text = optional_string(doc, "charge");
    auto mode = text ? parse_charge(*text) : std::nullopt;
    if (!mode)
      throw std::invalid_argument("DemoOrder: \"charge\" must be \"ok\", "
                                  "\"declined\" or \"broken\"");
    s.charge = *mode;
  }
  if (doc.HasMember("amount")) {
    auto& a = doc["amount"];
    if (!a.IsInt64() || a.GetInt64() <= 0)
      throw std::invalid_argument(
        "DemoOrder: \"amount\" must be a positive integer");
    s.amount = a.GetInt64();
  }
  return s;
}

step_command order_command(order_step step, const order_state& s) {
  auto data = [&](const char* step_name, auto behavior) {
    return object([&](writer& w) {
      key_string(w, "step", step_name);
      key_string(w, "order_id", s.order_id);
      w.Key("amount");
      w.Int64(s.amount);
      behavior(w);
    });
  };
  switch (step) {
    case order_step::reserve:
      return {"Test", data("Reserve", [&](writer& w) {
                succeed(w, "reservation_id", "R-" + s.order_id);
              })};
    case order_step::charge:
      return {"Test",
              data("Charge", [&](writer& w) { charge_behavior(w, s); })};
    case order_step::ship:
      return {"Test", data("Ship", [&](writer& w) {
                succeed(w, "tracking_id", "T-" + s.order_id);
              })};
    case order_step::release:
      return {"Test", data("Release", [&](writer& w) {
                key_optional(w, "reservation_id", s.reservation_id);
                succeed(w, "released", "R-" + s.order_id);
              })};
    case order_step::refund:
      return {"Test", data("Refund", [&](writer& w) {
                key_optional(w, "payment_id", s.payment_id);
                succeed(w, "refunded", "P-" + s.order_id);
              })};
  }
  throw std::logic_error("DemoOrder: unknown step");
}

workflow_spec<order_state, order_step> demo_order_spec() {
  workflow_spec<order_state, order_step> spec;
  spec.process_type = demo_order_type;
  spec.steps = {{order_step::reserve, "Reserve"},
                {order_step::charge, "Charge"},
                {order_step::ship, "Ship"},
                {order_step::release, "Release"},
                {order_step::refund, "Refund"}};
  spec.to_json = to_json;
  spec.from_json = order_from_json;
  spec.initial_state = initial_order;
  spec.first_step = [](const order_state&) { return order_step::reserve; };
  spec.command_for = order_command;
  spec.update_state = update;
  spec.next_step = next;
  spec.compensation_for = {{order_step::reserve, order_step::release},
                           {order_step::charge, order_step::refund}};
  return spec;
}

std::shared_ptr<const workflow> demo_order_workflow() {
  static const auto w
    = std::make_shared<const workflow_definition<order_state, order_step>>(
      demo_order_spec());
  return w;
}

void register_demo_workflows(process_registry& registry,
                             const std::string& domain) {
  registry.add(domain, demo_order_workflow());
}

} // namespace cmdbus::demo
