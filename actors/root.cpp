#include "actors/runtime.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "db/pool.hpp"

namespace cmdbus::actors {

std::chrono::milliseconds restart_delay(int restarts) {
  return db::backoff_delay(std::max(restarts, 1), std::chrono::seconds{1}, 2.0,
                           std::chrono::seconds{60});
}

namespace {

using self_ptr = caf::stateful_actor<root_state>*;

void start_domain(self_ptr self, size_t i) {
  auto& st = self->state;
  auto sup = st.spawn(self, st.domains[i]);
  self->monitor(sup);
  st.supervisors[i] = sup;
  st.started[i] = std::chrono::steady_clock::now();
}

} // namespace

caf::behavior root(self_ptr self, std::vector<domain_settings> domains,
                   domain_spawner spawn) {
  auto& st = self->state;
  st.domains = std::move(domains);
  st.spawn = std::move(spawn);
  st.supervisors.resize(st.domains.size());
  st.restarts.resize(st.domains.size(), 0);
  st.started.resize(st.domains.size());
  for (size_t i = 0; i < st.domains.size(); ++i)
    start_domain(self, i);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    for (size_t i = 0; i < st.supervisors.size(); ++i) {
      if (st.supervisors[i] != dm.source)
        continue;
      st.supervisors[i] = caf::actor{};
      auto& d = st.domains[i];
      // Its messages reappear after their visibility timeout.
      if (d.domain_in_flight) {
        d.counters->in_flight -= d.domain_in_flight->exchange(0);
      }
      if (st.stopping)
        return;
      if (std::chrono::steady_clock::now() - st.started[i]
          > std::chrono::minutes{1})
        st.restarts[i] = 0;
      auto delay = restart_delay(++st.restarts[i]);
      spdlog::error("{}: domain {} stopped ({}); restarting in {} ms",
                    self->name(), d.domain, to_string(dm.reason),
                    delay.count());
      self->delayed_send(self, delay, atom::restart::value, i);
      return;
    }
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    auto& st = self->state;
    st.stopping = true;
    for (auto& s : st.supervisors)
      if (s)
        self->send_exit(s, em.reason);
    self->quit(em.reason);
  });
  return {
    [self](atom::restart, size_t i) {
      auto& st = self->state;
      if (!st.stopping && i < st.supervisors.size() && !st.supervisors[i])
        start_domain(self, i);
    },
    [self](atom::drain) -> caf::result<atom::done> {
      auto& st = self->state;
      st.stopping = true;
      auto pending = std::make_shared<size_t>(0);
      for (auto& s : st.supervisors)
        if (s)
          ++*pending;
      // Answer directly when there is nothing to wait for (a promise, once
      // made, takes over the reply).
      if (*pending == 0)
        return atom::done::value;
      auto rp = self->make_response_promise<atom::done>();
      for (auto& s : st.supervisors) {
        if (!s)
          continue;
        self->request(s, caf::infinite, atom::drain::value)
          .then(
            [rp, pending](atom::done) mutable {
              if (--*pending == 0)
                rp.deliver(atom::done::value);
            },
            [rp, pending](caf::error&) mutable {
              // A domain that died while draining has nothing to drain.
              if (--*pending == 0)
                rp.deliver(atom::done::value);
            });
      }
      return rp;
    },
  };
}

} // namespace cmdbus::actors
