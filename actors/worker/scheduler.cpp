// The worker's scheduler (see scheduler.hpp).

#include "cmdbus/actors/worker/scheduler.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace {

using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;
using std::chrono::milliseconds;

/// Rounds of full batches per domain and wakeup before the others get
/// their turn (the rest follows at the next wakeup, at once).
constexpr int max_batches_per_round = 10;

class db_schedule_store : public schedule_store {
public:
  explicit db_schedule_store(std::shared_ptr<const config::worker_config> cfg)
    : cfg_(std::move(cfg)) {
    // nop
  }

  schedules::fire_result fire(const std::string& domain, int limit) override {
    return schedules::fire_due(session(domain).get(), domain, limit);
  }

  std::optional<std::chrono::microseconds>
  until_next(const std::string& domain) override {
    return schedules::until_next_slot(session(domain).get(), domain);
  }

  milliseconds failed(const std::string& domain,
                      const std::exception& e) override {
    return session(domain).failed(e);
  }

  void succeeded(const std::string& domain) override {
    session(domain).succeeded();
  }

private:
  db_session& session(const std::string& domain) {
    const auto& dsn = config::dsn_for(*cfg_, domain);
    auto& s = sessions_[dsn];
    if (!s) {
      session_options opts;
      opts.dsn = dsn;
      opts.statement_timeout = cfg_->statement_timeout;
      opts.application_name = "cmdbus-scheduler";
      opts.pooler = cfg_->pooler;
      s = std::make_unique<db_session>("scheduler", std::move(opts), nullptr);
    }
    return *s;
  }

  std::shared_ptr<const config::worker_config> cfg_;
  std::map<std::string, std::unique_ptr<db_session>> sessions_;
};

void arm(self_ptr self, milliseconds delay) {
  auto& st = self->state;
  st.armed = std::max(milliseconds{1}, delay);
  self->delayed_send(self, st.armed, atom::wakeup::value, ++st.timer);
}

void account(self_ptr self, const std::string& domain,
             const schedules::fire_result& r) {
  auto& st = self->state;
  auto m = st.settings.metrics.find(domain);
  auto lg = log::from(std::string{st.name} + "/" + domain);
  for (auto& f : r.slots) {
    auto late_ms = std::chrono::duration_cast<milliseconds>(f.lateness).count();
    if (f.sent()) {
      lg.debug("scheduler: schedule {}/{} fired slot {} as command {} ({} ms "
               "late{})",
               domain, f.name, format_timestamp(f.slot),
               f.command_id.to_string(), late_ms,
               f.missed > 0 ? ", " + std::to_string(f.missed)
                                + " missed slot(s) passed over"
                            : std::string{});
      if (m != st.settings.metrics.end() && m->second) {
        m->second->schedule_fired += 1;
        m->second->schedule_lateness_us += f.lateness.count();
        m->second->schedule_last_lateness_us = f.lateness.count();
      }
    } else if (f.already_sent) {
      lg.debug("scheduler: schedule {}/{} slot {} was fired before (command "
               "{}); advanced",
               domain, f.name, format_timestamp(f.slot),
               f.command_id.to_string());
    } else {
      lg.debug("scheduler: schedule {}/{} passed over {} missed slot(s) "
               "before its next slot {} (misfire policy skip)",
               domain, f.name, f.missed, format_timestamp(f.slot));
    }
  }
}

// Fires what is due in every domain that is not backing off, then sleeps
// until the earliest next slot, at most max_sleep.
void round(self_ptr self) {
  auto& st = self->state;
  ++st.rounds;
  auto sleep = st.settings.max_sleep;
  auto now = self->clock().now();
  for (auto& domain : st.settings.domains) {
    auto retry = st.retry_at.find(domain);
    if (retry != st.retry_at.end() && retry->second > now) {
      sleep = std::min(sleep,
                       std::chrono::ceil<milliseconds>(retry->second - now));
      continue;
    }
    try {
      for (int i = 0; i < max_batches_per_round; ++i) {
        auto r = st.store->fire(domain, st.settings.batch);
        account(self, domain, r);
        if (r.claimed < st.settings.batch)
          break;
      }
      auto until = st.store->until_next(domain);
      st.store->succeeded(domain);
      st.retry_at.erase(domain);
      if (until) {
        auto wait = *until <= std::chrono::microseconds{0}
                      ? st.settings.busy_sleep
                      : std::chrono::ceil<milliseconds>(*until);
        sleep = std::min(sleep, wait);
      }
    } catch (const std::exception& e) {
      if (auto m = st.settings.metrics.find(domain);
          m != st.settings.metrics.end() && m->second)
        m->second->other_db_errors += 1;
      auto delay = st.store->failed(domain, e);
      st.retry_at[domain] = now + delay;
      sleep = std::min(sleep, delay);
    }
  }
  arm(self, sleep);
}

} // namespace

std::shared_ptr<schedule_store>
make_schedule_store(std::shared_ptr<const config::worker_config> cfg) {
  return std::make_shared<db_schedule_store>(std::move(cfg));
}

scheduler_actor::behavior_type
scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
          scheduler_settings settings, std::shared_ptr<schedule_store> store,
          caf::actor_addr watched) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.settings.batch = std::max(1, st.settings.batch);
  st.store = std::move(store);
  self->set_exit_handler([self](caf::exit_msg& em) {
    // Closes the sessions before the actor ends.
    self->state.store.reset();
    self->quit(em.reason);
  });
  if (watched) {
    // A strong handle for the monitor: `watched` may already be gone (the
    // worker was stopped while this detached actor started), and CAF
    // reaches a weak address's actor without checking that it still lives.
    // An ended actor answers the monitor with a down message at once.
    auto alive = caf::actor_cast<caf::strong_actor_ptr>(watched);
    if (!alive) {
      st.store.reset();
      self->quit(caf::exit_reason::user_shutdown);
    } else {
      self->monitor(alive);
      self->set_down_handler([self](caf::down_msg& dm) {
        self->state.store.reset();
        self->quit(dm.reason);
      });
    }
  }
  if (st.store)
    self->send(self, atom::wakeup::value, ++st.timer);
  return {
    [self](atom::wakeup, uint64_t timer) {
      if (timer == self->state.timer && self->state.store)
        round(self);
    },
  };
}

scheduler_actor spawn_scheduler(caf::actor_system& sys, root_actor root,
                                scheduler_settings settings,
                                std::shared_ptr<schedule_store> store) {
  return sys.spawn<caf::detached>(scheduler, std::move(settings),
                                  std::move(store), root.address());
}

} // namespace cmdbus::actors
