#include "cmdbus/process/router.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/worker/poller.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/text_format.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/model/wire.hpp"
#include "cmdbus/process/process_actor.hpp"
#include "cmdbus/process/process_writer.hpp"

namespace cmdbus::actors {

namespace {

using self_ptr = process_router_actor::stateful_pointer<process_router_state>;
using clock = std::chrono::steady_clock;

process_router_actor::behavior_type router_behavior(self_ptr self);

// Re-arms the poll timeout (the behaviour's idle timeout, as the poller's:
// a delayed message would keep a detached actor alive at shutdown).
void arm_timer(self_ptr self, std::optional<std::chrono::milliseconds> delay) {
  auto& st = self->state;
  if (st.next_poll == delay)
    return;
  st.next_poll = delay;
  self->become(router_behavior(self));
}

void schedule_read(self_ptr self) {
  auto& st = self->state;
  if (!st.draining && st.wake->raise())
    self->send(self, atom::wakeup::value);
}

void finish_drain_if_done(self_ptr self) {
  auto& st = self->state;
  if (!st.draining || st.in_flight > 0)
    return;
  for (auto& rp : st.drains)
    rp.deliver(atom::done::value);
  st.drains.clear();
}

process_writer_actor writer_for(process_router_state& st, const uuid& id) {
  // One writer per process: its transitions never wait for each other's
  // locks on two connections.
  return st
    .writers[std::hash<std::string>{}(id.to_string()) % st.writers.size()];
}

void route(self_ptr self, process_reply_message m) {
  auto& st = self->state;
  auto& p = st.processes[m.process_id];
  if (!p.actor)
    p.actor = self->spawn<caf::linked>(process_actor_behavior, m.process_id,
                                       st.settings.domain,
                                       process_router_actor{self},
                                       writer_for(st, m.process_id),
                                       st.settings.idle_after);
  ++p.pending;
  ++st.in_flight;
  self->send(p.actor, atom::handle::value, std::move(m));
}

// A message that can never apply: archived (kept for an operator), or left
// to reappear when even that fails.
void reject(self_ptr self, const raw_reply& raw, const std::string& why) {
  auto& st = self->state;
  try {
    st.io.archive(raw.msg_id);
    log::from(st.name).warn("{}: message {} of {} is not a process reply "
                            "({}); archived",
                            st.name, raw.msg_id, st.settings.queue, why);
  } catch (const std::exception& e) {
    st.session->failed(e);
  }
}

void sweep_if_due(self_ptr self) {
  auto& st = self->state;
  auto now = clock::now();
  if (!st.settings.sweep_tsq || now < st.next_sweep || st.writers.empty())
    return;
  st.next_sweep = now + st.settings.sweep_every;
  self->request(st.writers.front(), caf::infinite, atom::sweep::value)
    .then([](int64_t) {}, [](caf::error&) {});
}

void read(self_ptr self) {
  auto& st = self->state;
  if (st.draining)
    return;
  sweep_if_due(self);
  auto credits = st.settings.max_in_flight - st.in_flight;
  if (credits <= 0)
    return;
  if (st.session->outage().backing_off()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      st.session->outage().retry_at() - clock::now());
    arm_timer(self, std::max(std::chrono::milliseconds{1}, left));
    return;
  }
  std::vector<raw_reply> batch;
  try {
    auto vt = static_cast<int>(st.settings.cfg->visibility_timeout.count());
    batch = st.io.read(vt, static_cast<int>(credits));
    st.session->succeeded();
  } catch (const std::exception& e) {
    arm_timer(self, st.session->failed(e));
    return;
  }
  for (auto& raw : batch) {
    reply r;
    try {
      r = wire::decode_reply(raw.body);
    } catch (const std::exception& e) {
      reject(self, raw, log::one_line(e.what()));
      continue;
    }
    if (!r.correlation_id) {
      reject(self, raw, "it has no correlation_id");
      continue;
    }
    auto id = *r.correlation_id;
    route(self, {raw.msg_id, raw.read_ct, id, std::move(r)});
  }
  if (static_cast<int64_t>(batch.size()) >= credits) {
    st.empty_reads = 0;
    schedule_read(self);
    return;
  }
  st.empty_reads = batch.empty() ? st.empty_reads + 1 : 0;
  arm_timer(self, batch.empty() ? idle_delay(st.settings.cfg->poll_interval,
                                             st.empty_reads, st.rng)
                                : st.settings.cfg->poll_interval);
}

process_router_actor::behavior_type router_behavior(self_ptr self) {
  auto on_drain = [self](atom::drain) -> caf::result<atom::done> {
    auto& st = self->state;
    st.draining = true;
    st.listen.reset();
    auto rp = self->make_response_promise<atom::done>();
    st.drains.push_back(rp);
    finish_drain_if_done(self);
    return rp;
  };
  auto on_committed = [self](atom::committed, const uuid& id, int64_t) {
    auto& st = self->state;
    --st.in_flight;
    if (auto i = st.processes.find(id); i != st.processes.end())
      --i->second.pending;
    finish_drain_if_done(self);
    // Reads refill at half the credits (one read for many freed slots, not
    // one per reply); new replies wake the router through NOTIFY anyway.
    if (st.in_flight <= st.settings.max_in_flight / 2)
      schedule_read(self);
  };
  auto on_idle = [self](atom::idle, const uuid& id) {
    auto& st = self->state;
    auto i = st.processes.find(id);
    if (i == st.processes.end() || i->second.pending > 0)
      return; // a reply is on its way to it: it stays
    self->send(i->second.actor, atom::stop::value);
    st.processes.erase(i);
  };
  auto on_wakeup = [self](atom::wakeup) {
    self->state.wake->take();
    read(self);
  };
  auto on_sweep = [self](atom::sweep) { sweep_if_due(self); };
  auto& st = self->state;
  if (!st.next_poll || st.draining)
    return {on_drain, on_committed, on_idle, on_wakeup, on_sweep};
  return {on_drain, on_committed,
          on_idle,  on_wakeup,
          on_sweep, caf::after(*st.next_poll) >> [self] { read(self); }};
}

// A linked actor ended: a writer is replaced, a process actor forgotten
// (its replies reappear after their visibility timeout); any other ending
// that is not normal (the root's) ends the router.
void on_exit(self_ptr self, caf::exit_msg& em) {
  auto& st = self->state;
  for (auto& w : st.writers) {
    if (w.address() != em.source)
      continue;
    log::from(st.name).error("{}: a process writer died ({}); replacing it",
                             st.name, to_string(em.reason));
    w = st.spawn_writer(self, st.settings);
    return;
  }
  for (auto i = st.processes.begin(); i != st.processes.end(); ++i) {
    if (i->second.actor.address() != em.source)
      continue;
    st.in_flight -= i->second.pending;
    st.processes.erase(i);
    log::from(st.name).warn("{}: a process actor ended ({}); its replies "
                            "come again after their visibility timeout",
                            st.name, to_string(em.reason));
    finish_drain_if_done(self);
    schedule_read(self);
    return;
  }
  if (em.reason == caf::exit_reason::normal)
    return; // a process actor that was told to stop
  st.listen.reset();
  st.session->close();
  self->quit(em.reason);
}

} // namespace

process_router_actor::behavior_type
process_router(self_ptr self, process_settings settings, router_io io,
               process_writer_spawner spawn_writer) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.name = "process-router/" + st.settings.domain;
  st.session = std::make_unique<db_session>(
    st.name, process_router_session_options(st.settings),
    process_db_errors(st.settings), [self] { return self->clock().now(); });
  st.session->report_outages_to(st.settings.health);
  if (io.read) {
    st.io = std::move(io);
  } else {
    auto queue = st.settings.queue;
    // Only the replies this worker may apply (and messages nobody can):
    // every other message is left as it is, for the process manager that
    // serves it (sql/commandbus/V008).
    auto types = db::array_literal(st.settings.types);
    st.io.read = [self, queue, types](int vt, int qty) {
      auto r = self->state.session->get().query(
        "SELECT msg_id, read_ct, message::text FROM "
        "commandbus.cmdbus_claim_process_replies($1, $2, $3::text[], $4, $5)",
        queue, self->state.settings.domain, types, vt, qty);
      std::vector<raw_reply> out;
      for (int i = 0; i < r.rows(); ++i)
        out.push_back({r.int64(i, 0), static_cast<int>(r.int64(i, 1)),
                       std::string{r.text(i, 2)}});
      return out;
    };
    st.io.archive = [self, queue](int64_t msg_id) {
      self->state.session->get().query("SELECT pgmq.archive($1, $2::bigint)",
                                       queue, msg_id);
    };
  }
  st.spawn_writer = spawn_writer
                      ? std::move(spawn_writer)
                      : process_writer_spawner{
                        [](process_router_actor::pointer parent,
                           const process_settings& s) {
                          auto w = spawn_process_writer(parent->system(), s);
                          parent->link_to(w);
                          return w;
                        }};
  for (int i = 0; i < std::max(1, st.settings.writers); ++i)
    st.writers.push_back(st.spawn_writer(self, st.settings));
  if (config::listens(*st.settings.cfg))
    st.listen = std::make_unique<listener>(
      "listener/" + st.settings.queue,
      config::dsn_for(*st.settings.cfg, st.settings.domain),
      db::notify_channel(st.settings.queue),
      [target = process_router_actor{self}, wake = st.wake] {
        if (wake->raise())
          caf::anon_send(target, atom::wakeup::value);
      });
  self->set_exit_handler([self](caf::exit_msg& em) { on_exit(self, em); });
  st.next_poll = st.settings.cfg->poll_interval;
  st.next_sweep = clock::now();
  schedule_read(self);
  return router_behavior(self);
}

process_router_actor spawn_process_router(caf::actor_system& sys,
                                          const process_settings& settings) {
  return sys.spawn<caf::detached>(process_router, settings, router_io{},
                                  process_writer_spawner{});
}

} // namespace cmdbus::actors
