#include "cmdbus/actors/worker/root.hpp"

#include <algorithm>

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

// Once every domain and router drained, the batch counter handles what they
// reported before (its mailbox is in order), then the drain is done.
void finish_drain(self_ptr self, caf::typed_response_promise<atom::done> rp) {
  auto& st = self->state;
  if (!st.counter) {
    rp.deliver(atom::done::value);
    return;
  }
  self->request(st.counter, caf::infinite, atom::drain::value)
    .then([rp](atom::done) mutable { rp.deliver(atom::done::value); },
          [rp](caf::error&) mutable { rp.deliver(atom::done::value); });
}

// Unit `i` (a domain, or a router after the domains) has nothing left to
// drain for drain `id`: it answered, could not, or ended.
void unit_drained(self_ptr self, uint64_t id, size_t i) {
  auto& st = self->state;
  auto it = st.drains.find(id);
  if (it == st.drains.end() || !it->second.waiting[i])
    return;
  it->second.waiting[i] = false;
  if (--it->second.left > 0)
    return;
  auto rp = std::move(it->second.rp);
  st.drains.erase(it);
  finish_drain(self, std::move(rp));
}

// Unit `i` ended: it holds nothing any more, whatever drain waits for it
// (its answer never comes: the promise ended with it).
void unit_ended(self_ptr self, size_t i) {
  std::vector<uint64_t> ids;
  for (auto& entry : self->state.drains)
    ids.push_back(entry.first);
  for (auto id : ids)
    unit_drained(self, id, i);
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
  auto i = st.domains.size() + r;
  unit_ended(self, i);
  if (st.stopping)
    return;
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
  // What it held is in flight no more: the messages reappear after their
  // visibility timeout.
  d.metrics->in_flight.store(0);
  unit_ended(self, i);
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
      root_state::drain_request d;
      d.waiting.resize(st.supervisors.size() + st.routers.size());
      for (size_t i = 0; i < st.supervisors.size(); ++i)
        d.waiting[i] = static_cast<bool>(st.supervisors[i]);
      for (size_t r = 0; r < st.routers.size(); ++r)
        d.waiting[st.supervisors.size() + r] = static_cast<bool>(st.routers[r]);
      d.left = static_cast<size_t>(
        std::count(d.waiting.begin(), d.waiting.end(), true));
      if (d.left == 0) {
        finish_drain(self, rp);
        return rp;
      }
      d.rp = rp;
      auto id = ++st.next_drain;
      st.drains.emplace(id, std::move(d));
      auto ask = [self, id](const auto& unit, size_t i) {
        self->request(unit, caf::infinite, atom::drain::value)
          .then([self, id, i](atom::done) { unit_drained(self, id, i); },
                [self, id, i](caf::error&) { unit_drained(self, id, i); });
      };
      for (size_t i = 0; i < st.supervisors.size(); ++i)
        if (st.supervisors[i])
          ask(st.supervisors[i], i);
      for (size_t r = 0; r < st.routers.size(); ++r)
        if (st.routers[r])
          ask(st.routers[r], st.supervisors.size() + r);
      return rp;
    },
  };
}

} // namespace cmdbus::actors
