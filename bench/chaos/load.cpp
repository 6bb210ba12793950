#include "bench/chaos/load.hpp"

#include <algorithm>
#include <random>

namespace cmdbus::chaos {

const char* name_of(behaviour b) noexcept {
  switch (b) {
    case behaviour::success: return "success";
    case behaviour::transient_then_success: return "transient";
    case behaviour::permanent: return "permanent";
    case behaviour::business_rule: return "business_rule";
  }
  return "?";
}

const char* final_status_of(behaviour b) noexcept {
  switch (b) {
    case behaviour::success:
    case behaviour::transient_then_success: return "COMPLETED";
    case behaviour::permanent: return "IN_TROUBLESHOOTING_QUEUE";
    case behaviour::business_rule: return "FAILED";
  }
  return "?";
}

int expected_runs(behaviour b) noexcept {
  return b == behaviour::transient_then_success ? 2 : 1;
}

json command_data(const load_plan& plan, size_t n) {
  const auto& c = plan.commands[n];
  const auto& s = plan.settings;
  std::string b = "{\"min_duration_ms\": " + std::to_string(s.min_duration_ms)
                  + ", \"max_duration_ms\": "
                  + std::to_string(s.max_duration_ms);
  switch (c.what) {
    case behaviour::success:
      b += R"(, "outcome": "success", "result": {"ok": true})";
      break;
    case behaviour::transient_then_success:
      b += R"(, "transient_attempts": 1, "outcome": "success", "result": {"ok": true})";
      break;
    case behaviour::permanent: b += R"(, "outcome": "permanent")"; break;
    case behaviour::business_rule:
      b += R"(, "outcome": "business_rule")";
      break;
  }
  return json::parse("{\"n\": " + std::to_string(n) + ", \"behavior\": " + b
                     + "}}");
}

load_plan make_plan(const std::string& domain, const load_settings& s) {
  load_plan plan;
  plan.domain = domain;
  plan.reply_queue = domain + "__replies";
  plan.settings = s;
  std::mt19937_64 rng{s.seed};
  auto n = static_cast<size_t>(std::max(0, s.commands));
  plan.commands.resize(n);
  std::vector<size_t> permanent, others;
  for (size_t i = 0; i < n; ++i) {
    auto& c = plan.commands[i];
    c.id = uuid::random();
    c.what = static_cast<behaviour>(i % 4);
    // Every other command of each behaviour asks for a reply.
    c.reply = (i / 4) % 2 == 0;
    (c.what == behaviour::permanent ? permanent : others).push_back(i);
  }
  if (s.delayed_every > 0) {
    std::uniform_int_distribution<int> delay_ms{500,
                                                std::max(500, s.max_delay_ms)};
    for (size_t i = 0; i < n; i += static_cast<size_t>(s.delayed_every))
      plan.commands[i].delay = std::chrono::milliseconds{delay_ms(rng)};
  }
  std::shuffle(permanent.begin(), permanent.end(), rng);
  std::shuffle(others.begin(), others.end(), rng);
  auto size = static_cast<size_t>(std::max(1, s.batch_size));
  auto batches = s.batch_size > 0 ? n / 3 / size : 0;
  for (size_t b = 0; b < batches; ++b) {
    planned_batch batch;
    batch.id = uuid::random();
    // Every third batch gets a quarter of permanent failures.
    size_t from_permanent = b % 3 == 2 ? std::max<size_t>(1, size / 4) : 0;
    for (size_t k = 0; k < size; ++k) {
      auto& pool = k < from_permanent && !permanent.empty() ? permanent
                                                            : others;
      if (pool.empty())
        break;
      batch.members.push_back(pool.back());
      plan.commands[pool.back()].batch = plan.batches.size();
      pool.pop_back();
    }
    if (!batch.members.empty())
      plan.batches.push_back(std::move(batch));
  }
  for (size_t b = 0; b < plan.batches.size(); ++b)
    plan.units.push_back({true, b});
  for (size_t i = 0; i < n; ++i)
    if (!plan.commands[i].batch)
      plan.units.push_back({false, i});
  std::shuffle(plan.units.begin(), plan.units.end(), rng);
  return plan;
}

} // namespace cmdbus::chaos
