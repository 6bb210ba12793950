#include "cmdbus/actors/worker/root.hpp"

#include <caf/all.hpp>

#include "cmdbus/model/backoff.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

std::chrono::milliseconds restart_delay(int restarts) {
  auto ms = backoff::exponential(std::max(restarts, 1), 1000, 2.0, 60000);
  return std::chrono::milliseconds{static_cast<int64_t>(ms)};
}

namespace {

using self_ptr = root_actor::stateful_pointer<root_state>;

void start_domain(self_ptr self, size_t i) {
  auto& st = self->state;
  st.supervisors[i] = st.spawn(self, st.domains[i]);
  st.started[i] = std::chrono::steady_clock::now();
  if (auto& h = st.domains[i].health) {
    h->restarting.store(false);
    evaluate_and_log(st.domains[i].domain, *h);
  }
}

void start_router(self_ptr self, size_t r) {
  auto& st = self->state;
  st.routers[r] = st.spawn_router(self, st.process_domains[r]);
  st.started[st.domains.size() + r] = std::chrono::steady_clock::now();
}

// Counts a restart of unit `i` (a domain, or a router after the domains)
// and returns its delay.
std::chrono::milliseconds next_restart(root_state& st, size_t i) {
  if (std::chrono::steady_clock::now() - st.started[i]
      > std::chrono::minutes{1})
    st.restarts[i] = 0;
  return restart_delay(++st.restarts[i]);
}

// A process router ended: the replies it held reappear after their
// visibility timeout; unless the worker stops, it starts again after a
// backoff.
void router_stopped(self_ptr self, size_t r, const caf::error& reason) {
  auto& st = self->state;
  st.routers[r] = nullptr;
  if (st.stopping)
    return;
  auto i = st.domains.size() + r;
  auto delay = next_restart(st, i);
  auto& domain = st.process_domains[r].domain;
  log::from({"worker-root", domain})
    .error("worker-root: the process router of domain {} stopped ({}); "
           "restarting in {} ms",
           domain, to_string(reason), delay.count());
  self->delayed_send(self, delay, atom::restart::value, i);
}

// A domain's supervisor ended: its messages reappear after their
// visibility timeout; unless the worker stops, the domain starts again
// after a backoff.
void domain_stopped(self_ptr self, size_t i, const caf::error& reason) {
  auto& st = self->state;
  st.supervisors[i] = nullptr;
  auto& d = st.domains[i];
  if (d.domain_in_flight)
    d.counters->in_flight -= d.domain_in_flight->exchange(0);
  if (st.stopping)
    return;
  auto delay = next_restart(st, i);
  if (d.health) {
    // What the ended supervisor counted no longer runs.
    d.health->stuck_handlers.store(0);
    d.health->stalled_writers.store(0);
    d.health->restarts.store(st.restarts[i]);
    d.health->restarting.store(true);
    evaluate_and_log(d.domain, *d.health);
  }
  log::from({"worker-root", d.domain})
    .error("worker-root: domain {} stopped ({}); restarting in {} ms", d.domain,
           to_string(reason), delay.count());
  self->delayed_send(self, delay, atom::restart::value, i);
}

} // namespace

root_actor::behavior_type
root(self_ptr self, std::vector<domain_settings> domains, domain_spawner spawn,
     counter_spawner spawn_counter,
     std::vector<process_settings> process_domains,
     router_spawner spawn_router) {
  auto& st = self->state;
  st.domains = std::move(domains);
  st.spawn = std::move(spawn);
  st.spawn_counter = std::move(spawn_counter);
  st.process_domains = std::move(process_domains);
  st.spawn_router = std::move(spawn_router);
  if (!st.spawn_router)
    st.process_domains.clear();
  st.supervisors.resize(st.domains.size());
  st.routers.resize(st.process_domains.size());
  auto units = st.domains.size() + st.process_domains.size();
  st.restarts.resize(units, 0);
  st.started.resize(units);
  if (st.spawn_counter)
    st.counter = st.spawn_counter(self);
  for (size_t i = 0; i < st.domains.size(); ++i)
    start_domain(self, i);
  for (size_t r = 0; r < st.routers.size(); ++r)
    start_router(self, r);
  // Supervisors and the batch counter are linked: their exit messages
  // arrive here. Any other exit message (the worker stopping) ends the
  // root, and the links end everything below it.
  self->set_exit_handler([self](caf::exit_msg& em) {
    auto& st = self->state;
    for (size_t i = 0; i < st.supervisors.size(); ++i) {
      if (st.supervisors[i] && st.supervisors[i].address() == em.source) {
        domain_stopped(self, i, em.reason);
        return;
      }
    }
    for (size_t r = 0; r < st.routers.size(); ++r) {
      if (st.routers[r] && st.routers[r].address() == em.source) {
        router_stopped(self, r, em.reason);
        return;
      }
    }
    if (st.counter && st.counter.address() == em.source) {
      st.counter = nullptr;
      if (!st.stopping) {
        log::from("worker-root")
          .error("worker-root: the batch counter died ({}); replacing "
                 "it (recorded completions are delivered by its first "
                 "sweep)",
                 to_string(em.reason));
        st.counter = st.spawn_counter(self);
      }
      return;
    }
    if (!em.reason)
      return;
    st.stopping = true;
    self->quit(em.reason);
  });
  return {
    [self](atom::restart, size_t i) {
      auto& st = self->state;
      if (st.stopping)
        return;
      if (i < st.supervisors.size()) {
        if (!st.supervisors[i])
          start_domain(self, i);
        return;
      }
      auto r = i - st.supervisors.size();
      if (r < st.routers.size() && !st.routers[r])
        start_router(self, r);
    },
    [self](atom::batches, std::string& domain, std::vector<uuid>& ids) {
      auto& st = self->state;
      if (st.counter)
        self->send(st.counter, atom::batches::value, std::move(domain),
                   std::move(ids));
    },
    [self](atom::drain) -> caf::result<atom::done> {
      auto& st = self->state;
      st.stopping = true;
      auto rp = self->make_response_promise<atom::done>();
      // Once every domain drained, the batch counter handles what they
      // reported before (its mailbox is in order), then the drain is done.
      auto finish = [self, rp]() mutable {
        auto& st = self->state;
        if (!st.counter) {
          rp.deliver(atom::done::value);
          return;
        }
        self->request(st.counter, caf::infinite, atom::drain::value)
          .then([rp](atom::done) mutable { rp.deliver(atom::done::value); },
                [rp](caf::error&) mutable { rp.deliver(atom::done::value); });
      };
      auto pending = std::make_shared<size_t>(0);
      for (auto& s : st.supervisors)
        if (s)
          ++*pending;
      for (auto& r : st.routers)
        if (r)
          ++*pending;
      if (*pending == 0) {
        finish();
        return rp;
      }
      // A domain or router that dies while draining has nothing left to
      // drain.
      auto one_done = [pending, finish]() mutable {
        if (--*pending == 0)
          finish();
      };
      auto ask = [self, one_done](const auto& unit) {
        self->request(unit, caf::infinite, atom::drain::value)
          .then([one_done](atom::done) mutable { one_done(); },
                [one_done](caf::error&) mutable { one_done(); });
      };
      for (auto& s : st.supervisors)
        if (s)
          ask(s);
      for (auto& r : st.routers)
        if (r)
          ask(r);
      return rp;
    },
  };
}

} // namespace cmdbus::actors
