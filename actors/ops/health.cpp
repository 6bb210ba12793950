#include "cmdbus/actors/ops/health.hpp"

#include <algorithm>
#include <chrono>

#include "cmdbus/model/log.hpp"

namespace cmdbus {

const char* to_string(health_state s) noexcept {
  switch (s) {
    case health_state::healthy: return "HEALTHY";
    case health_state::degraded: return "DEGRADED";
    default: return "CRITICAL";
  }
}

void domain_health_counters::outage_began(int64_t now_ms) noexcept {
  if (failing_sessions.fetch_add(1) == 0) {
    int64_t none = 0;
    outage_since_ms.compare_exchange_strong(none, std::max<int64_t>(now_ms, 1));
  }
}

void domain_health_counters::outage_ended() noexcept {
  if (failing_sessions.fetch_sub(1) == 1)
    outage_since_ms.store(0);
}

void domain_health_counters::poller_read(int64_t now_ms,
                                         int64_t credits) noexcept {
  poller_credits.store(credits, std::memory_order_relaxed);
  poller_due_since_ms.store(std::max<int64_t>(now_ms, 1),
                            std::memory_order_relaxed);
}

void domain_health_counters::poller_credited(int64_t now_ms,
                                             int64_t credits) noexcept {
  // Credits after a time without any: the poller is due from now on.
  if (poller_credits.exchange(credits, std::memory_order_relaxed) <= 0
      && credits > 0 && polling())
    poller_due_since_ms.store(std::max<int64_t>(now_ms, 1),
                              std::memory_order_relaxed);
}

void domain_health_counters::clear_running() noexcept {
  poller_due_since_ms.store(0);
  poller_credits.store(0);
  stuck_handlers.store(0);
  stalled_writers.store(0);
  restarting.store(false);
  restarts.store(0);
}

domain_health_inputs read_inputs(const domain_health_counters& c,
                                 int64_t now_ms) noexcept {
  domain_health_inputs in;
  in.consecutive_failures = c.consecutive_failures.load();
  in.failing_sessions = std::max<int64_t>(c.failing_sessions.load(), 0);
  auto since = c.outage_since_ms.load();
  if (in.failing_sessions > 0 && since > 0)
    in.db_unavailable_ms = std::max<int64_t>(now_ms - since, 1);
  in.stuck_handlers = c.stuck_handlers.load();
  in.stalled_writers = c.stalled_writers.load();
  in.restarting = c.restarting.load();
  in.restarts = c.restarts.load();
  in.poller_stale_after_ms = c.poller_stale_after_ms.load();
  auto due = c.poller_due_since_ms.load();
  if (in.poller_stale_after_ms > 0 && due > 0 && c.poller_credits.load() > 0)
    in.poller_idle_ms = std::max<int64_t>(now_ms - due, 0);
  return in;
}

domain_health evaluate(std::string domain, const domain_health_inputs& in) {
  domain_health h;
  h.domain = std::move(domain);
  h.figures = in;
  auto raise = [&h](health_state s, std::string why) {
    h.state = std::max(h.state, s);
    h.reasons.push_back(std::move(why));
  };
  if (in.consecutive_failures >= health_limits::degraded_consecutive_failures)
    raise(health_state::degraded, std::to_string(in.consecutive_failures)
                                    + " consecutive handler failures");
  if (in.failing_sessions > 0) {
    auto secs = std::to_string(in.db_unavailable_ms / 1000) + "s";
    raise(in.db_unavailable_ms >= health_limits::critical_db_outage_ms
            ? health_state::critical
            : health_state::degraded,
          "database unavailable for " + secs);
  }
  if (in.stuck_handlers > 0)
    raise(in.stuck_handlers >= health_limits::critical_stuck_handlers
            ? health_state::critical
            : health_state::degraded,
          std::to_string(in.stuck_handlers)
            + " handler(s) stuck past visibility timeout + "
            + std::to_string(health_limits::stuck_grace_ms / 1000) + "s");
  if (in.stalled_writers > 0)
    raise(health_state::degraded,
          std::to_string(in.stalled_writers)
            + " side-effect writer(s) not committing for "
            + std::to_string(health_limits::writer_stalled_ms / 1000) + "s");
  // A poller in a database outage waits for its backoff: the outage is
  // the reason then.
  if (in.failing_sessions == 0 && in.poller_stale_after_ms > 0
      && in.poller_idle_ms >= in.poller_stale_after_ms)
    raise(health_state::degraded, "poller has not read for "
                                    + std::to_string(in.poller_idle_ms / 1000)
                                    + "s with free slots");
  if (in.restarting)
    raise(in.restarts >= health_limits::critical_restarts
            ? health_state::critical
            : health_state::degraded,
          "domain restarting (" + std::to_string(in.restarts)
            + " restart(s) in a row)");
  return h;
}

bool log_if_changed(domain_health_counters& c, const domain_health& h) {
  auto now = static_cast<int>(h.state);
  if (c.logged_state.exchange(now) == now)
    return false;
  std::string why;
  for (auto& r : h.reasons)
    why += (why.empty() ? "" : "; ") + r;
  if (h.state == health_state::healthy)
    log::from({"health", h.domain})
      .info("domain {} is HEALTHY again", h.domain);
  else if (h.state == health_state::degraded)
    log::from({"health", h.domain})
      .warn("domain {} is DEGRADED: {}", h.domain, why);
  else
    log::from({"health", h.domain})
      .error("domain {} is CRITICAL: {}", h.domain, why);
  return true;
}

domain_health evaluate_and_log(const std::string& domain,
                               domain_health_counters& c) {
  auto h = evaluate(domain, read_inputs(c, health_now_ms()));
  log_if_changed(c, h);
  return h;
}

worker_health combine(std::vector<domain_health> domains) {
  worker_health w;
  for (auto& d : domains)
    w.state = std::max(w.state, d.state);
  w.domains = std::move(domains);
  return w;
}

int64_t health_now_ms() noexcept {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch())
    .count();
}

} // namespace cmdbus
