#include "cmdbus/actors/worker/supervisor.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/worker/fault.hpp"
#include "cmdbus/actors/worker/supervisor_steps.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace supervisor_steps {

using clock = std::chrono::steady_clock;

supervisor_state::pool& pool_of(supervisor_state& st, handler_mode mode) {
  return st.pools[static_cast<size_t>(mode)];
}

// The pool that runs `rc`: its handler's mode, or any pool for a command
// without a handler (it fails at once).
supervisor_state::pool& pool_for(supervisor_state& st,
                                 const received_command& rc) {
  auto& p = pool_of(st, st.settings.registry->mode(rc.cmd.domain,
                                                   rc.cmd.command_type));
  if (!p.all.empty())
    return p;
  for (auto& other : st.pools)
    if (!other.all.empty())
      return other;
  return p;
}

// Hands `x` to a writer and remembers when, for the writer's watchdog.
template <class Writer, class Atom, class Item>
void hand_over(self_ptr self, const Writer& writer,
               supervisor_state::writer_log& wl, Atom atom, Item&& x) {
  auto now = self->clock().now();
  if (wl.pending.empty())
    wl.last_progress = now;
  wl.pending.push_back(now);
  self->send(writer, atom, std::forward<Item>(x));
}

// Routes a handler's outcome to the writer that owns its side effects.
void route(self_ptr self, const received_command& rc, outcome out) {
  auto& st = self->state;
  if (st.settings.health) {
    if (out.kind == outcome_kind::success)
      st.settings.health->consecutive_failures.store(0);
    else if (out.kind != outcome_kind::business_rule)
      st.settings.health->consecutive_failures += 1;
  }
  if (out.kind == outcome_kind::transient && rc.attempt < rc.max_attempts) {
    db::retry_command x{rc, std::move(out),
                        backoff_seconds(st.settings.cfg->retry, rc.attempt,
                                        st.rng)};
    hand_over(self, st.retry, st.retry_log, atom::retry::value, std::move(x));
  } else {
    bool exhausted = out.kind == outcome_kind::transient;
    db::finished_command x{rc, std::move(out), exhausted};
    hand_over(self, st.completion, st.completion_log, atom::finish::value,
              std::move(x));
  }
}

// Starts `w` on an idle local handler of pool `p`.
void start_local(self_ptr self, supervisor_state::pool& p,
                 supervisor_state::waiting& w) {
  auto& st = self->state;
  auto h = p.idle.front();
  p.idle.pop_front();
  cap_started(st, w.rc->cmd.command_type);
  auto delivery = ++st.next_delivery;
  st.running.emplace(delivery,
                     supervisor_state::running_command{
                       h, w.rc, w.read_at, self->clock().now(),
                       std::string{}});
  self->request(h, caf::infinite, atom::handle::value, std::move(w.rc))
    .then(
      [self, h, delivery](outcome& out) {
        maybe_crash(fault_point::after_handler);
        auto& st = self->state;
        auto i = st.running.find(delivery);
        if (i == st.running.end())
          return;
        auto rc = std::move(i->second.rc);
        auto took = self->clock().now() - i->second.started_at;
        st.settings.metrics->of(rc->cmd.command_type).duration.observe(took);
        st.running.erase(i);
        pool_for(st, *rc).idle.push_back(h);
        // Handed over first, so that the hold limit counts it.
        route(self, *rc, std::move(out));
        cap_released(self, rc->cmd.command_type, true);
        handler_freed(self, 1);
        tune_prefetch(self, took);
        dispatch(self);
      },
      [self, delivery](caf::error& err) {
        // The handler died while running it (its exit message replaces
        // it). The message reappears after its visibility timeout.
        auto& st = self->state;
        auto i = st.running.find(delivery);
        if (i == st.running.end())
          return;
        log::from(st.name).warn("{} lost command msg_id {}: {}", st.name,
                                i->second.rc->msg_id, describe(err));
        auto type = i->second.rc->cmd.command_type;
        st.running.erase(i);
        cap_released(self, type, true);
        handler_freed(self, 1);
        progress(self);
      });
}

// Starts every waiting command (in order) that has a free slot on its
// route. Without remote pools that is the idle handlers of its pool, in
// order. With them, a command type a local handler serves runs locally
// (no network hop); others go where route_remote says (actors/worker/
// supervisor_remote.cpp). Credits bound the commands held to the slots plus
// `prefetch`: the prefetched ones wait here for a free slot (as does any
// command while a dead handler is replaced).
void dispatch(self_ptr self) {
  auto& st = self->state;
  bool with_remotes = !st.links.empty();
  for (auto it = st.backlog.begin(); it != st.backlog.end();) {
    if (!below_cap(st, it->rc->cmd.command_type)) {
      // Its type runs at its cap: the commands behind it may start.
      ++it;
      continue;
    }
    if (with_remotes) {
      auto where = route_remote(self, *it);
      if (where == remote_route::started) {
        it = st.backlog.erase(it);
        continue;
      }
      if (where == remote_route::waits) {
        ++it;
        continue;
      }
    }
    auto& p = pool_for(st, *it->rc);
    if (p.idle.empty()) {
      if (!with_remotes)
        return; // in order: nothing behind it can start either
      ++it;
      continue;
    }
    start_local(self, p, *it);
    it = st.backlog.erase(it);
  }
}

bool below_cap(const supervisor_state& st, const std::string& type) {
  auto i = st.caps.find(type);
  return i == st.caps.end() || i->second.running < i->second.limit;
}

void cap_started(supervisor_state& st, const std::string& type) {
  auto i = st.caps.find(type);
  if (i != st.caps.end())
    i->second.running += 1;
}

void cap_released(self_ptr self, const std::string& type, bool was_running) {
  auto& st = self->state;
  auto i = st.caps.find(type);
  if (i == st.caps.end())
    return;
  if (was_running)
    i->second.running -= 1;
  i->second.held -= 1;
  if (st.draining || !st.poller)
    return;
  self->send(st.poller, atom::credit::value, type, int64_t{1});
  ++st.credits_sent;
  st.poller_idle = false;
}

// Answers waiting drains once nothing is held and intake stopped (or, in
// tick mode, the poller found the queue empty after its last credit).
void maybe_finish_drain(self_ptr self) {
  auto& st = self->state;
  if (st.held() > 0 || !(st.draining || (st.settings.tick && st.poller_idle)))
    return;
  for (auto& rp : st.drain_waiters)
    rp.deliver(atom::done::value);
  st.drain_waiters.clear();
}

// Sends `n` credits (0 just makes the poller read again) unless intake
// stopped. An "idle" from the poller counts only once it saw this credit.
void give_credit(self_ptr self, int64_t n) {
  auto& st = self->state;
  if (st.draining || !st.poller)
    return;
  self->send(st.poller, atom::credit::value, n);
  st.credits.sent(n);
  ++st.credits_sent;
  st.poller_idle = false;
}

// A local command held its slot for `took`: with `prefetch = auto`, the
// prefetch follows the measured slot time (actors/worker/prefetch_tuner.hpp).
// More prefetch is more credits at once; less takes them back from the
// pending ones first, the rest as a debt that freed slots pay (the credits
// the poller holds or commands use stay where they are).
void tune_prefetch(self_ptr self, std::chrono::nanoseconds took) {
  auto& st = self->state;
  if (!st.auto_prefetch || st.draining)
    return;
  auto next = st.tuner.finished(took);
  if (!next)
    return;
  auto change = *next - st.prefetch;
  log::from(st.name).debug("{} prefetch {} -> {} (mean slot time {} us)",
                           st.name, st.prefetch, *next,
                           st.tuner.mean().count() / 1000);
  st.prefetch = *next;
  st.settings.metrics->prefetch = *next;
  if (change > 0) {
    if (st.credits.freed(change))
      flush_credit(self);
  } else if (change < 0) {
    st.credits.shrunk(-change);
  }
}

// Returns the pending credits to the poller now, as far as the hold limit
// allows; the rest goes out as side effects commit.
void flush_credit(self_ptr self) {
  auto& st = self->state;
  auto n = st.credits.release(hold_limit(st.capacity()) - st.held()
                              - st.credits.granted());
  if (n > 0)
    give_credit(self, n);
}

// `n` handler slots became free: the poller may read that many more
// messages. Credits go back at once when no handler runs any more (then
// the poller reads for the whole pool), else after at most flush_interval
// (atom::credit_due), so that reads stay large under load (a small read
// costs nearly as much as a large one) while a freed slot never waits
// long for work.
void handler_freed(self_ptr self, int64_t n) {
  auto& st = self->state;
  st.settings.metrics->in_flight -= n;
  auto first = st.credits.pending() == 0;
  if (!st.credits.freed(n))
    return;
  if (st.running.empty() && st.backlog.empty()) {
    flush_credit(self);
  } else if (first) {
    self->delayed_send(self, st.settings.cfg->flush_interval,
                       atom::credit_due::value, st.credits.epoch());
  }
}

// Fewer messages are held: credits kept back by the hold limit may go out,
// and a drain may be complete.
void progress(self_ptr self) {
  if (self->state.credits.withheld())
    flush_credit(self);
  maybe_finish_drain(self);
}

// The side effects of `n` commands handed to the writer behind `wl` are
// committed (or dropped as stale). In tick mode the poller reads once more,
// since a retry may have become due.
void committed(self_ptr self, supervisor_state::writer_log& wl, int64_t n) {
  auto& st = self->state;
  for (int64_t i = 0; i < n && !wl.pending.empty(); ++i)
    wl.pending.pop_front();
  wl.last_progress = self->clock().now();
  if (st.settings.tick)
    give_credit(self, 0);
  progress(self);
}

// The lease heartbeat's period: a quarter of the visibility timeout (at
// least 100 ms), so that a message is extended between half and three
// quarters of its visibility timeout, well before it expires.
std::chrono::milliseconds heartbeat_period(std::chrono::seconds vt) {
  return std::max(std::chrono::milliseconds{100},
                  std::chrono::duration_cast<std::chrono::milliseconds>(vt)
                    / 4);
}

// Marks the deferred deliveries of `claimed` (msg_ids) as claimed.
void mark_claimed(supervisor_state& st, const std::vector<int64_t>& claimed) {
  auto update = [&](command_ptr& rc) {
    if (!rc->deferred
        || std::find(claimed.begin(), claimed.end(), rc->msg_id)
             == claimed.end())
      return;
    auto copy = std::make_shared<received_command>(*rc);
    copy->deferred = false;
    rc = std::move(copy);
  };
  for (auto& [delivery, run] : st.running)
    update(run.rc);
  for (auto& w : st.backlog)
    update(w.rc);
}

// Asks the retry scheduler to claim `due` (deferred deliveries) and marks
// those it claimed.
void request_claims(self_ptr self, std::vector<received_command> due) {
  auto& st = self->state;
  if (due.empty())
    return;
  log::from(st.name).debug("{} claims {} deferred delivery(ies)", st.name,
                           due.size());
  self->request(st.retry, caf::infinite, atom::claim::value, std::move(due))
    .then([self](std::vector<int64_t>& claimed) {
            log::from(self->state.name)
              .debug("{} claimed {} deferred delivery(ies)", self->state.name,
                     claimed.size());
            mark_claimed(self->state, claimed);
          },
          [self](caf::error& err) {
            log::from(self->state.name)
              .debug("{} claiming deferred deliveries failed: {}",
                     self->state.name, describe(err));
          });
}

// Claims the deferred deliveries held for `after` or longer (a heartbeat
// period, or less when extensions come sooner; docs/worker.md, "Deferred
// claims"): a handler that takes that long
// shows IN_PROGRESS like any other, and its message is claimed before a
// later heartbeat extends it (the extension would end the read's fence).
void claim_deferred(self_ptr self, clock::time_point now,
                    std::chrono::milliseconds after) {
  auto& st = self->state;
  std::vector<received_command> due;
  for (auto& [delivery, run] : st.running)
    if (run.rc->deferred && now - run.read_at >= after)
      due.push_back(*run.rc);
  for (auto& w : st.backlog)
    if (w.rc->deferred && now - w.read_at >= after)
      due.push_back(*w.rc);
  request_claims(self, std::move(due));
}

// Claims the deferred deliveries among `msg_ids` (a handler extends them).
void claim_deferred(self_ptr self, const std::vector<int64_t>& msg_ids) {
  auto& st = self->state;
  auto wanted = [&](const command_ptr& rc) {
    return rc->deferred
           && std::find(msg_ids.begin(), msg_ids.end(), rc->msg_id)
                != msg_ids.end();
  };
  std::vector<received_command> due;
  for (auto& [delivery, run] : st.running)
    if (wanted(run.rc))
      due.push_back(*run.rc);
  request_claims(self, std::move(due));
}

// Extends the messages held longer than half the visibility timeout since
// they were read, whether their handler runs or they still wait for one.
void extend_leases(self_ptr self) {
  auto& st = self->state;
  auto vt = st.settings.cfg->visibility_timeout;
  auto half = std::chrono::duration_cast<std::chrono::milliseconds>(vt) / 2;
  auto now = self->clock().now();
  // Claimed first: every deferred delivery this pass extends (and those
  // held for a heartbeat period) goes ahead in the same mailbox.
  claim_deferred(self, now, std::min(heartbeat_period(vt), half));
  std::vector<int64_t> due;
  for (auto& [delivery, run] : st.running)
    if (now - run.read_at >= half)
      due.push_back(run.rc->msg_id);
  for (auto& w : st.backlog)
    if (now - w.read_at >= half)
      due.push_back(w.rc->msg_id);
  if (due.empty())
    return;
  // keep_longer: never shorten a longer explicit extension.
  self
    ->request(st.retry, caf::infinite, atom::extend::value, std::move(due),
              static_cast<int>(vt.count()), true)
    .then([](int) {},
          [self](caf::error& err) {
            log::from(self->state.name)
              .debug("{} lease heartbeat failed: {}", self->state.name,
                     describe(err));
          });
}

// Returns whether the writer behind `wl` holds side effects and made no
// progress for stuck_after without reporting the database unavailable.
bool stuck(const supervisor_state& st, const supervisor_state::writer_log& wl,
           clock::time_point now) {
  if (wl.pending.empty())
    return false;
  auto last = std::max(wl.last_progress, wl.last_unavailable);
  return now - last > stuck_after(st.settings);
}

// Restarts the domain (through the root) when a writer is stuck: its
// thread may be blocked for good, and the messages it holds reappear after
// their visibility timeout for the new domain supervisor.
bool check_writers(self_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  for (auto* wl : {&st.completion_log, &st.retry_log}) {
    if (!stuck(st, *wl, now))
      continue;
    auto secs = std::chrono::duration_cast<std::chrono::seconds>(
                  now - wl->last_progress)
                  .count();
    log::from(st.name).error(
      "{}: the {} holds {} side effect(s) and made no progress "
      "for {} s while the database answers; restarting the "
      "domain",
      st.name,
      wl == &st.completion_log ? "completion writer" : "retry scheduler",
      wl->pending.size(), secs);
    self->quit(caf::make_error(ec::writer_stuck, st.name));
    return false;
  }
  return true;
}

// Counts the stuck handlers and stalled writers for the domain's health
// and logs a change of its state (once per heartbeat: a pass over what the
// domain holds, no query).
void report_health(self_ptr self) {
  auto& st = self->state;
  if (!st.settings.health)
    return;
  auto now = self->clock().now();
  auto stuck_after = st.settings.cfg->visibility_timeout
                     + std::chrono::milliseconds{health_limits::stuck_grace_ms};
  int64_t stuck = 0;
  for (auto& [delivery, run] : st.running)
    if (now - run.read_at > stuck_after)
      ++stuck;
  int64_t stalled = 0;
  for (auto* wl : {&st.completion_log, &st.retry_log})
    if (!wl->pending.empty()
        && now - wl->last_progress
             > std::chrono::milliseconds{health_limits::writer_stalled_ms})
      ++stalled;
  st.settings.health->stuck_handlers.store(stuck);
  st.settings.health->stalled_writers.store(stalled);
  evaluate_and_log(st.settings.domain, *st.settings.health);
}

bool has_local_handlers(const supervisor_state& st) {
  for (auto& [domain, type] : st.settings.registry->keys())
    if (domain == st.settings.domain)
      return true;
  return false;
}

void add_handler(self_ptr self, handler_mode mode) {
  auto& st = self->state;
  auto h = st.spawn.handler(self, st.settings, mode);
  pool_of(st, mode).all.push_back(h);
  pool_of(st, mode).idle.push_back(h);
}

// Replaces a dead handler; returns false if `source` is none of ours.
bool replace_handler(self_ptr self, const caf::actor_addr& source,
                     const caf::error& reason) {
  auto& st = self->state;
  auto is_src = [&](const handler_actor& a) { return a.address() == source; };
  for (auto mode : {handler_mode::blocking, handler_mode::non_blocking}) {
    auto& p = pool_of(st, mode);
    auto it = std::find_if(p.all.begin(), p.all.end(), is_src);
    if (it == p.all.end())
      continue;
    p.all.erase(it);
    p.idle.erase(std::remove_if(p.idle.begin(), p.idle.end(), is_src),
                 p.idle.end());
    st.settings.metrics->handler_restarts += 1;
    log::from(st.name).warn("{} handler died ({}); replacing it", st.name,
                            to_string(reason));
    if (!st.draining)
      add_handler(self, mode);
    dispatch(self);
    return true;
  }
  return false;
}

// Replaces a dead writer; what it held is lost with it (the messages
// reappear after their visibility timeout). Returns false if `source` is
// neither writer.
bool replace_writer(self_ptr self, const caf::actor_addr& source,
                    const caf::error& reason) {
  auto& st = self->state;
  bool is_completion = st.completion && st.completion.address() == source;
  bool is_retry = st.retry && st.retry.address() == source;
  if (!is_completion && !is_retry)
    return false;
  auto& wl = is_completion ? st.completion_log : st.retry_log;
  log::from(st.name).error(
    "{}: the {} died ({}); {} side effect(s) are lost with it and "
    "their messages reappear after the visibility timeout; "
    "replacing it",
    st.name, is_completion ? "completion writer" : "retry scheduler",
    to_string(reason), wl.pending.size());
  wl.pending.clear();
  if (is_completion)
    st.completion = st.spawn.completion(self, st.settings);
  else
    st.retry = st.spawn.retry(self, st.settings);
  progress(self);
  return true;
}

} // namespace supervisor_steps

using namespace supervisor_steps;

supervisor_actor::behavior_type
supervisor(supervisor_actor::stateful_pointer<supervisor_state> self,
           domain_settings settings, spawners spawn,
           batch_listener_actor parent) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.spawn = std::move(spawn);
  st.parent = std::move(parent);
  st.name = "supervisor/" + st.settings.domain;
  st.completion = st.spawn.completion(self, st.settings);
  st.retry = st.spawn.retry(self, st.settings);
  // With remote pools, a domain without local handlers has no local slots;
  // the poller still starts with `concurrency` + `prefetch` credits, so
  // the local share starts as debt.
  const auto& pools = st.settings.cfg->remote.pools;
  bool local = pools.empty() || has_local_handlers(st);
  if (local)
    for (auto mode : {handler_mode::blocking, handler_mode::non_blocking})
      if (st.settings.registry->uses(st.settings.domain, mode))
        for (int i = 0; i < st.settings.cfg->concurrency; ++i)
          add_handler(self, mode);
  st.local_slots = local ? st.settings.cfg->concurrency : 0;
  for (auto& [type, limit] :
       config::scheduling_of(*st.settings.cfg, st.settings.domain)
         .type_concurrency)
    st.caps[type].limit = limit;
  st.prefetch = config::starting_prefetch(*st.settings.cfg);
  // Not for reads by priority: a command read ahead would wait in front of
  // a more urgent one sent after it.
  st.auto_prefetch = st.settings.cfg->prefetch == config::prefetch_auto
                     && !st.settings.tick && st.local_slots > 0
                     && !config::scheduling_of(*st.settings.cfg,
                                               st.settings.domain)
                           .priorities;
  st.tuner = prefetch_tuner{st.local_slots};
  st.settings.metrics->prefetch = st.prefetch;
  st.credits.start(st.settings.cfg->concurrency + st.prefetch,
                   st.settings.cfg->concurrency - st.local_slots);
  st.poller = st.spawn.poller(self, st.settings);
  st.links.resize(pools.size());
  for (size_t i = 0; i < pools.size(); ++i)
    add_link(self, i);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    for (auto& r : st.remotes)
      if (r.hdl.address() == dm.source) {
        auto address = r.address;
        drop_pool(self, address, to_string(dm.reason));
        return;
      }
  });
  // Children are linked: their exit messages arrive here. A dead handler or
  // writer is replaced; anything else (the root stopping us, the poller
  // dying) ends the domain, and the links end the children with it.
  self->set_exit_handler([self](caf::exit_msg& em) {
    auto& st = self->state;
    if (replace_handler(self, em.source, em.reason)
        || replace_writer(self, em.source, em.reason)
        || replace_link(self, em.source, em.reason))
      return;
    if (st.poller && em.source == st.poller.address())
      log::from(st.name).error(
        "{}: the poller died ({}); restarting the domain", st.name,
        to_string(em.reason));
    else if (!em.reason)
      return; // a normal exit of an actor we no longer track
    self->quit(em.reason);
  });
  self->delayed_send(self,
                     heartbeat_period(st.settings.cfg->visibility_timeout),
                     atom::heartbeat::value);
  return {
    // -- from the poller -----------------------------------------------------
    [self](atom::run, std::vector<received_command>& batch) {
      auto& st = self->state;
      auto n = static_cast<int64_t>(batch.size());
      st.poller_idle = false;
      st.credits.used(n);
      st.settings.metrics->in_flight += n;
      st.settings.metrics->received += n;
      auto now = self->clock().now();
      for (auto& rc : batch) {
        auto cap = st.caps.find(rc.cmd.command_type);
        if (cap != st.caps.end())
          cap->second.held += 1;
      }
      for (auto& rc : batch)
        st.backlog.push_back(
          {std::make_shared<const received_command>(std::move(rc)), now});
      dispatch(self);
    },
    [self](atom::finish, db::finished_command& x) {
      // A claimed message that cannot run (e.g. undecodable): finish it.
      // It took one of the poller's credits but no handler.
      auto& st = self->state;
      st.credits.used(1);
      st.settings.metrics->received += 1;
      hand_over(self, st.completion, st.completion_log, atom::finish::value,
                std::move(x));
      if (st.credits.freed(1))
        flush_credit(self);
    },
    [self](atom::empty, int64_t credits_seen) {
      // Only an empty read made after the poller got every credit counts
      // (an older one raced with a credit that makes it read again).
      auto& st = self->state;
      st.poller_idle = credits_seen == st.credits_sent;
      maybe_finish_drain(self);
    },
    // -- from the writers ----------------------------------------------------
    [self](atom::committed, int64_t n) {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (st.completion && sender == st.completion.address())
        committed(self, st.completion_log, n);
      else if (st.retry && sender == st.retry.address())
        committed(self, st.retry_log, n);
    },
    [self](atom::unavailable) {
      auto& st = self->state;
      auto sender = self->current_sender();
      auto& wl = st.completion && sender == st.completion.address()
                   ? st.completion_log
                   : st.retry_log;
      wl.last_unavailable = self->clock().now();
    },
    [self](atom::batches, std::string& domain, std::vector<uuid>& ids) {
      auto& st = self->state;
      if (st.parent)
        self->send(st.parent, atom::batches::value, std::move(domain),
                   std::move(ids));
    },
    // -- from handlers -------------------------------------------------------
    [self](atom::extend, std::vector<int64_t>& msg_ids, int seconds,
           bool keep_longer) {
      // A deferred delivery is claimed first: the extension ends its
      // read's fence (the claim goes ahead in the same mailbox).
      claim_deferred(self, msg_ids);
      return self->delegate(self->state.retry, atom::extend::value,
                            std::move(msg_ids), seconds, keep_longer);
    },
    // -- from the root -------------------------------------------------------
    [self](atom::drain) -> caf::result<atom::done> {
      auto& st = self->state;
      if (!st.settings.tick || st.draining) {
        st.draining = true;
        if (st.poller) {
          self->unlink_from(st.poller);
          self->send_exit(st.poller, caf::exit_reason::user_shutdown);
          st.poller = nullptr;
        }
        self->send(st.completion, atom::flush::value);
        self->send(st.retry, atom::flush::value);
        stop_links(self);
        release_waiting(self, true);
      }
      if (st.held() <= 0 && (st.draining || st.poller_idle))
        return atom::done::value;
      auto rp = self->make_response_promise<atom::done>();
      st.drain_waiters.push_back(rp);
      return rp;
    },
    // -- internal ------------------------------------------------------------
    [self](atom::credit_due, uint64_t epoch) {
      // Stale when the credits went out meanwhile.
      if (epoch == self->state.credits.epoch())
        flush_credit(self);
    },
    [self](atom::heartbeat) {
      auto& st = self->state;
      if (!check_writers(self))
        return;
      self->delayed_send(self,
                         heartbeat_period(st.settings.cfg->visibility_timeout),
                         atom::heartbeat::value);
      extend_leases(self);
      release_waiting(self, false);
      report_health(self);
    },
    // -- from the remote links -----------------------------------------------
    [self](atom::pool_up, std::string& address, remote::pool_offer& offer,
           remote::handler_pool_actor& pool) {
      add_pool(self, address, offer, pool);
    },
    [self](atom::pool_down, std::string& address) {
      drop_pool(self, address, "disconnected");
    },
  };
}

} // namespace cmdbus::actors
