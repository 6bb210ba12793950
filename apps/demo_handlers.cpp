#include "apps/demo_handlers.hpp"

#include <random>
#include <thread>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace cmdbus::demo {

namespace {

double number(const rapidjson::Value& obj, const char* key) {
  auto it = obj.FindMember(key);
  return it != obj.MemberEnd() && it->value.IsNumber() ? it->value.GetDouble()
                                                       : 0.0;
}

std::string text(const rapidjson::Value& obj, const char* key,
                 const char* fallback) {
  auto it = obj.FindMember(key);
  return it != obj.MemberEnd() && it->value.IsString()
           ? std::string{it->value.GetString(), it->value.GetStringLength()}
           : std::string{fallback};
}

enum class outcome { success, permanent, transient, business_rule };

// The outcome of this attempt: the fixed `outcome` when the behavior names
// one, else one roll against the percentages.
outcome choose(const rapidjson::Value& behavior, std::mt19937_64& rng) {
  if (behavior.HasMember("outcome")) {
    auto name = text(behavior, "outcome", "");
    if (name == "success")
      return outcome::success;
    if (name == "permanent")
      return outcome::permanent;
    if (name == "business_rule")
      return outcome::business_rule;
    // A behavior the handler cannot follow will never succeed either.
    throw permanent_command_error(
      "DEMO_BAD_BEHAVIOR",
      "behavior.outcome must be \"success\", \"permanent\" or "
      "\"business_rule\"");
  }
  std::uniform_real_distribution<double> roll_d{0.0, 100.0};
  auto roll = roll_d(rng);
  auto permanent = number(behavior, "fail_permanent_pct");
  auto transient = number(behavior, "fail_transient_pct");
  auto business = number(behavior, "fail_business_rule_pct");
  if (roll < permanent)
    return outcome::permanent;
  if (roll < permanent + transient)
    return outcome::transient;
  if (roll < permanent + transient + business)
    return outcome::business_rule;
  return outcome::success;
}

// Adds "served_by": `name` to a result that is null or an object without
// that key (on a handler node, so that one can see where a command ran).
json with_served_by(json result, const std::string& name) {
  if (name.empty() || !(result.is_null() || result.is_object()))
    return result;
  rapidjson::Document doc;
  doc.Parse(result.is_null() ? "{}" : result.text().c_str());
  if (doc.HasMember("served_by"))
    return result;
  auto& alloc = doc.GetAllocator();
  doc.AddMember("served_by",
                rapidjson::Value{name.c_str(),
                                 static_cast<rapidjson::SizeType>(name.size()),
                                 alloc},
                alloc);
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w{buf};
  doc.Accept(w);
  return json{std::string{buf.GetString(), buf.GetSize()}, json::trusted};
}

json test_handler(const command& cmd, handler_context& ctx) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  rapidjson::Document doc;
  doc.Parse(cmd.data.text().c_str());
  static const rapidjson::Value empty{rapidjson::kObjectType};
  const rapidjson::Value* behavior = &empty;
  if (doc.IsObject()) {
    auto it = doc.FindMember("behavior");
    if (it != doc.MemberEnd() && it->value.IsObject())
      behavior = &it->value;
  }
  auto min_ms = number(*behavior, "min_duration_ms");
  auto max_ms = std::max(min_ms, number(*behavior, "max_duration_ms"));
  if (max_ms > 0) {
    std::uniform_real_distribution<double> d{min_ms, max_ms};
    auto until = std::chrono::steady_clock::now()
                 + std::chrono::microseconds{
                   static_cast<int64_t>(d(rng) * 1000)};
    // Simulated work, cut short when the worker shuts down.
    while (std::chrono::steady_clock::now() < until && !ctx.cancelled())
      std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(
        until - std::chrono::steady_clock::now(),
        std::chrono::milliseconds{50}));
  }
  // The first `transient_attempts` attempts fail transiently; later ones
  // go on as configured below.
  if (ctx.attempt() <= number(*behavior, "transient_attempts"))
    throw transient_command_error(
      text(*behavior, "error_code", "DEMO_TRANSIENT"),
      text(*behavior, "error_message", "demo transient failure"));
  switch (choose(*behavior, rng)) {
    case outcome::permanent:
      throw permanent_command_error(
        text(*behavior, "error_code", "DEMO_PERMANENT"),
        text(*behavior, "error_message", "demo permanent failure"));
    case outcome::transient:
      throw transient_command_error(
        text(*behavior, "error_code", "DEMO_TRANSIENT"),
        text(*behavior, "error_message", "demo transient failure"));
    case outcome::business_rule:
      throw business_rule_error(
        text(*behavior, "error_code", "DEMO_BUSINESS_RULE"),
        text(*behavior, "error_message", "demo business rule"));
    case outcome::success: break;
  }
  auto it = behavior->FindMember("result");
  if (it == behavior->MemberEnd())
    return json::null();
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w{buf};
  it->value.Accept(w);
  return json{std::string{buf.GetString(), buf.GetSize()}, json::trusted};
}

} // namespace

void register_test_handler(handler_registry& registry,
                           const std::string& domain,
                           const std::string& served_by) {
  if (served_by.empty()) {
    registry.add(domain, "Test", test_handler);
    return;
  }
  registry.add(domain, "Test",
               [served_by](const command& cmd, handler_context& ctx) {
                 return with_served_by(test_handler(cmd, ctx), served_by);
               });
}

} // namespace cmdbus::demo
