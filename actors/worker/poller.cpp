#include "cmdbus/actors/worker/poller.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "cmdbus/actors/worker/fault.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/backoff.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

poller_state::poller_state() = default;

poller_state::~poller_state() = default;

std::chrono::milliseconds idle_delay(double min_ms, double max_ms,
                                     double jitter, int empty_reads,
                                     std::mt19937_64& rng) {
  auto ms = std::max<int64_t>(
    1, static_cast<int64_t>(
         backoff::exponential(std::max(empty_reads, 1), min_ms, 2.0, max_ms)));
  auto jittered = backoff::jitter(static_cast<double>(ms), 1.0 - jitter,
                                  1.0 + jitter, rng);
  return std::chrono::milliseconds{
    std::max<int64_t>(1, static_cast<int64_t>(jittered))};
}

std::chrono::milliseconds idle_delay(std::chrono::milliseconds poll_interval,
                                     int empty_reads, std::mt19937_64& rng) {
  auto base = static_cast<double>(poll_interval.count());
  return idle_delay(base / 4, base, 0.2, empty_reads, rng);
}

std::chrono::milliseconds idle_delay(const config::worker_config& cfg,
                                     int empty_reads, std::mt19937_64& rng) {
  return idle_delay(
    static_cast<double>(config::idle_backoff_min_of(cfg).count()),
    static_cast<double>(config::idle_backoff_max_of(cfg).count()),
    cfg.idle_jitter, empty_reads, rng);
}

db::read_options read_options_for(const poller_state& st, int qty) {
  db::read_options how;
  how.defer_claims = st.settings.cfg->deferred_claims;
  const auto& sched = config::scheduling_of(*st.settings.cfg,
                                            st.settings.domain);
  for (auto& [type, free] : st.type_credits)
    how.type_limits.emplace_back(
      type, static_cast<int>(std::clamp<int64_t>(free, 0, qty)));
  if (sched.priorities) {
    how.priority = true;
    auto every = std::max(1, sched.fifo_every);
    auto owed = (st.claimed + qty) / every - st.claimed_oldest;
    how.oldest = static_cast<int>(std::clamp<int64_t>(owed, 0, qty));
  }
  if (st.settings.tick && st.settings.shard_count > 1) {
    how.shard_index = st.settings.shard_index;
    how.shard_count = st.settings.shard_count;
  }
  return how;
}

namespace {

using self_ptr = poller_actor::stateful_pointer<poller_state>;

poller_actor::behavior_type poller_behavior(self_ptr self);
void schedule_read(self_ptr self);

// Re-arms the poll timeout. It is the behaviour's idle timeout (caf::after),
// not a delayed_send: a message pending in CAF's clock keeps a detached
// actor alive at shutdown.
void arm_timer(self_ptr self, std::chrono::milliseconds delay) {
  auto& st = self->state;
  if (st.next_poll == delay)
    return;
  st.next_poll = delay;
  self->become(poller_behavior(self));
}

// Tick mode: returns whether the run's limits stop the reads (its item
// budget is used up or its deadline passed; then marks the run cut), else
// lowers `qty` to what is left of the item budget.
bool tick_limit_reached(self_ptr self, int& qty) {
  auto& st = self->state;
  const auto& lim = st.settings.tick_limit;
  bool reached = false;
  if (lim.max_items) {
    auto left = *lim.max_items - st.claimed;
    if (left <= 0)
      reached = true;
    else
      qty = static_cast<int>(std::min<int64_t>(qty, left));
  }
  if (lim.deadline && self->clock().now() >= *lim.deadline)
    reached = true;
  if (reached && st.settings.tick_cut)
    st.settings.tick_cut->store(true);
  return reached;
}

void read(self_ptr self) {
  auto& st = self->state;
  if (st.credits <= 0) {
    st.behind = true;
    return;
  }
  if (st.session->outage().backing_off()) {
    // A credit or a NOTIFY arrived during the error backoff: read when it
    // ends, not before.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      st.session->outage().retry_at() - self->clock().now());
    arm_timer(self, std::max(std::chrono::milliseconds{1}, left));
    return;
  }
  auto qty = static_cast<int>(st.credits);
  if (st.settings.tick && tick_limit_reached(self, qty)) {
    // The run's budget stops the reads: report idle, so that the tick
    // drains what it holds and ends.
    self->send(st.parent, atom::empty::value, st.credits_seen);
    return;
  }
  st.last_read = self->clock().now();
  st.behind = true;
  try {
    auto vt = static_cast<int>(st.settings.cfg->visibility_timeout.count());
    auto how = read_options_for(st, qty);
    auto res = st.receive(vt, qty, how);
    st.session->succeeded();
    st.claimed += res.read;
    st.claimed_oldest += std::min(how.oldest, res.read);
    if (res.read > 0)
      maybe_crash(fault_point::after_receive);
    std::vector<received_command> runnable = std::move(res.commands);
    for (auto& r : res.rejected) {
      if (r.claimed) {
        // Claimed but undecodable: a permanent failure (archive + TSQ).
        outcome out;
        out.kind = outcome_kind::permanent;
        out.error_code = "INVALID_MESSAGE";
        out.error_message = r.detail;
        st.credits -= 1;
        self->send(st.parent, atom::finish::value,
                   db::finished_command{*r.claimed, std::move(out), false});
      } else {
        st.settings.metrics->rejected += 1;
        log::from(st.name).warn("{} archived message {} of {}: {}", st.name,
                                r.msg_id, db::command_queue(st.settings.domain),
                                log::one_line(r.reason));
      }
    }
    if (!runnable.empty()) {
      // A capped type's commands hold a slot of its cap until the
      // supervisor gives it back (atom::credit with the type).
      for (auto& rc : runnable) {
        auto i = st.type_credits.find(rc.cmd.command_type);
        if (i != st.type_credits.end())
          i->second -= 1;
      }
      st.credits -= static_cast<int64_t>(runnable.size());
      self->send(st.parent, atom::run::value, std::move(runnable));
    }
    if (st.settings.health)
      st.settings.health->poller_read(health_now_ms(), st.credits);
    st.behind = res.read >= qty;
    if (res.read >= qty) {
      // A full read: there may be more; read again as soon as possible, or
      // after the busy delay.
      st.empty_reads = 0;
      if (st.settings.tick || st.settings.cfg->busy_delay.count() <= 0)
        schedule_read(self);
      else
        arm_timer(self, st.settings.cfg->busy_delay);
    } else {
      if (res.read == 0) {
        ++st.empty_reads;
        self->send(st.parent, atom::empty::value, st.credits_seen);
      } else {
        st.empty_reads = 0;
      }
      if (!st.settings.tick)
        arm_timer(self, res.read == 0
                          ? idle_delay(*st.settings.cfg, st.empty_reads, st.rng)
                          : st.settings.cfg->poll_interval);
    }
  } catch (const std::exception& e) {
    arm_timer(self, st.session->failed(e));
  }
}

// Whether `n` credits (0: a request to read again) make the poller read. With
// a listener, a NOTIFY announces new messages, so only messages the last read
// may have left behind, or a due poll (for those that became visible without
// a NOTIFY), are worth a read; each read that finds nothing costs a round
// trip the credits of a busy domain would otherwise trigger one by one.
bool read_on_credit(self_ptr self, int64_t n) {
  auto& st = self->state;
  if (n == 0 || !st.notified || st.behind)
    return true;
  return st.next_poll && self->clock().now() >= st.last_read + *st.next_poll;
}

// Reads once the messages already in the mailbox are handled: the wakeup
// queues behind any credits and NOTIFYs that arrived meanwhile.
void schedule_read(self_ptr self) {
  if (self->state.wake->raise())
    self->send(self, atom::wakeup::value);
}

poller_actor::behavior_type poller_behavior(self_ptr self) {
  auto on_credit = [self](atom::credit, int64_t n) {
    auto& st = self->state;
    st.credits += n;
    ++st.credits_seen;
    if (st.settings.health)
      st.settings.health->poller_credited(health_now_ms(), st.credits);
    if (read_on_credit(self, n))
      schedule_read(self);
  };
  auto on_type_credit = [self](atom::credit, const std::string& type,
                               int64_t n) {
    auto& st = self->state;
    ++st.credits_seen;
    auto i = st.type_credits.find(type);
    if (i != st.type_credits.end())
      i->second += n;
    schedule_read(self);
  };
  auto on_wakeup = [self](atom::wakeup) {
    self->state.wake->take();
    read(self);
  };
  if (!self->state.next_poll)
    return {on_credit, on_type_credit, on_wakeup};
  return {on_credit, on_type_credit, on_wakeup,
          caf::after(*self->state.next_poll) >> [self] { read(self); }};
}

} // namespace

poller_actor::behavior_type
poller(poller_actor::stateful_pointer<poller_state> self,
       domain_settings settings, poller_parent_actor parent,
       receive_fn receive) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.parent = std::move(parent);
  st.name = "poller/" + st.settings.domain;
  auto opts = session_for(st.settings, "cmdbus-poller");
  opts.max_backoff = st.settings.cfg->error_backoff_max;
  st.session = std::make_unique<db_session>(
    st.name, std::move(opts), db_error_counter(st.settings, db_actor::poller),
    [self] { return self->clock().now(); });
  st.session->report_outages_to(st.settings.health);
  if (receive) {
    st.receive = std::move(receive);
  } else {
    st.receive = [self](int vt, int qty, const db::read_options& how) {
      auto& st = self->state;
      db::worker_store store{st.session->get(), st.settings.domain};
      return store.receive(vt, qty, how);
    };
  }
  st.credits = st.settings.cfg->concurrency
               + config::starting_prefetch(*st.settings.cfg);
  for (auto& [type, cap] :
       config::scheduling_of(*st.settings.cfg, st.settings.domain)
         .type_concurrency)
    st.type_credits[type] = cap;
  st.notified = config::listens(*st.settings.cfg) && !st.settings.tick;
  if (st.notified)
    st.listen = std::make_unique<listener>(
      "listener/" + st.settings.domain,
      config::dsn_for(*st.settings.cfg, st.settings.domain),
      db::notify_channel(db::command_queue(st.settings.domain)),
      [target = poller_actor{self}, wake = st.wake] {
        if (wake->raise())
          caf::anon_send(target, atom::wakeup::value);
      });
  self->set_exit_handler([self](caf::exit_msg& em) {
    self->state.listen.reset();
    self->state.session->close();
    self->quit(em.reason);
  });
  if (!st.settings.tick)
    st.next_poll = st.settings.cfg->poll_interval;
  schedule_read(self);
  return poller_behavior(self);
}

poller_actor spawn_poller(supervisor_actor::pointer parent,
                          const domain_settings& settings) {
  return parent->spawn<caf::detached + caf::linked>(
    poller, settings, poller_parent_actor{supervisor_actor{parent}},
    receive_fn{});
}

} // namespace cmdbus::actors
