// The remote handler pools of a domain supervisor (actors/worker/
// supervisor.hpp): a connected pool's slots join the domain's credits,
// commands of the types only it serves run there (the least busy pool
// first), and a pool that vanishes gives its running commands back to the
// queue at once and its slots back as a debt that freed slots pay.

#include <algorithm>

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/worker/supervisor_steps.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors::supervisor_steps {

namespace {

supervisor_state::remote_pool* find_remote(supervisor_state& st,
                                           const std::string& address) {
  for (auto& r : st.remotes)
    if (r.address == address)
      return &r;
  return nullptr;
}

bool serves(const supervisor_state::remote_pool& r, const std::string& type) {
  return std::binary_search(r.types.begin(), r.types.end(), type);
}

// The least busy connected pool serving `type` with a free slot, or null.
supervisor_state::remote_pool* free_remote(supervisor_state& st,
                                           const std::string& type) {
  supervisor_state::remote_pool* best = nullptr;
  for (auto& r : st.remotes)
    if (r.busy < r.slots && serves(r, type) && (!best || r.busy < best->busy))
      best = &r;
  return best;
}

bool served_locally(const supervisor_state& st, const std::string& type) {
  return st.settings.registry->find(st.settings.domain, type) != nullptr;
}

bool served_remotely(const supervisor_state& st, const std::string& type) {
  for (auto& r : st.remotes)
    if (serves(r, type))
      return true;
  return false;
}

// Whether `type` may yet be served by a pool that is not connected now.
bool pools_missing(const supervisor_state& st) {
  return st.remotes.size() < st.links.size();
}

// Starts `w` in the remote pool `r`. The pool's answer comes back as a
// wire outcome; when the pool vanishes first there is no answer at all (CAF
// drops requests to a lost node silently): drop_pool cleans up on its down
// message, and this continuation then finds nothing.
void start_remote(self_ptr self, supervisor_state::remote_pool& r,
                  supervisor_state::waiting& w) {
  auto& st = self->state;
  auto delivery = ++st.next_delivery;
  ++r.busy;
  cap_started(st, w.rc->cmd.command_type);
  auto wire = remote::to_wire(*w.rc);
  st.running.emplace(delivery,
                     supervisor_state::running_command{
                       handler_actor{}, std::move(w.rc), w.read_at,
                       self->clock().now(), r.address});
  // Done with the running entry: the pool's slot is free again.
  auto finish = [self](std::map<uint64_t,
                                supervisor_state::running_command>::iterator i) {
    auto& st = self->state;
    if (auto* pool = find_remote(st, i->second.remote))
      pool->busy -= 1;
    auto rc = std::move(i->second.rc);
    st.running.erase(i);
    cap_released(self, rc->cmd.command_type, true);
    return rc;
  };
  self->request(r.hdl, caf::infinite, atom::handle::value, std::move(wire))
    .then(
      [self, delivery, finish](remote::wire_outcome& wo) {
        auto& st = self->state;
        auto i = st.running.find(delivery);
        if (i == st.running.end())
          return; // dropped with its pool meanwhile
        st.settings.metrics->of(i->second.rc->cmd.command_type)
          .duration.observe(self->clock().now()
                            - i->second.started_at);
        auto rc = finish(i);
        route(self, *rc, remote::from_wire(wo));
        handler_freed(self, 1);
        dispatch(self);
      },
      [self, delivery, finish](caf::error& err) {
        // The node answered with an error instead of an outcome (it
        // refused the command or its pool failed): a transient failure,
        // retried with the usual backoff.
        auto& st = self->state;
        auto i = st.running.find(delivery);
        if (i == st.running.end())
          return;
        auto rc = finish(i);
        outcome out;
        out.kind = outcome_kind::transient;
        out.error_code = "REMOTE_POOL_ERROR";
        out.error_message = describe(err);
        log::from(st.name).warn("{} remote pool failed command msg_id {}: {}",
                                st.name, rc->msg_id, out.error_message);
        route(self, *rc, std::move(out));
        handler_freed(self, 1);
        dispatch(self);
      });
}

// Makes messages visible again after `seconds` (0: now) through the retry
// scheduler; if that fails (database down) they reappear after their
// visibility timeout anyway.
void release(self_ptr self, std::vector<int64_t> ids, int seconds) {
  if (ids.empty())
    return;
  self
    ->request(self->state.retry, caf::infinite, atom::extend::value,
              std::move(ids), seconds, false)
    .then([](int) {},
          [self](caf::error& err) {
            log::from(self->state.name)
              .warn("{} could not make commands visible again ({}); they "
                    "reappear after their visibility timeout",
                    self->state.name, describe(err));
          });
}

void publish_remote_slots(supervisor_state& st) {
  int64_t slots = 0;
  for (auto& r : st.remotes)
    slots += r.slots;
  st.settings.metrics->remote_slots.store(slots);
  st.settings.metrics->remote_pools.store(
    static_cast<int64_t>(st.remotes.size()));
}

} // namespace

remote_route route_remote(self_ptr self, supervisor_state::waiting& w) {
  auto& st = self->state;
  const auto& type = w.rc->cmd.command_type;
  if (served_locally(st, type))
    return remote_route::local;
  if (auto* r = free_remote(st, type)) {
    start_remote(self, *r, w);
    return remote_route::started;
  }
  // A command no pool serves waits while a pool is disconnected (it may
  // serve it: see release_waiting), and otherwise fails locally like any
  // command without a handler.
  if (served_remotely(st, type) || pools_missing(st))
    return remote_route::waits;
  return remote_route::local;
}

// Gives back waiting commands that no connected pool serves and no local
// handler runs: all of them (a drain, which waits for no reconnection), or
// those read at least a visibility timeout ago, which reappear after
// another one (a pool serving them has been missing that long).
void release_waiting(self_ptr self, bool all) {
  auto& st = self->state;
  if (st.links.empty())
    return;
  auto vt = st.settings.cfg->visibility_timeout;
  auto now = self->clock().now();
  std::vector<int64_t> ids;
  for (auto it = st.backlog.begin(); it != st.backlog.end();) {
    const auto& type = it->rc->cmd.command_type;
    if (!served_locally(st, type) && !served_remotely(st, type)
        && (all || now - it->read_at >= vt)) {
      ids.push_back(it->rc->msg_id);
      cap_released(self, type, false);
      it = st.backlog.erase(it);
    } else {
      ++it;
    }
  }
  if (ids.empty())
    return;
  log::from(st.name).warn("{}: no connected remote pool serves {} waiting "
                          "command(s); giving them back to the queue",
                          st.name, ids.size());
  auto n = static_cast<int64_t>(ids.size());
  release(self, std::move(ids),
          all ? 0 : static_cast<int>(vt.count()));
  handler_freed(self, n);
  progress(self);
}

// Removes the remote pool at `address` (nothing when it is not connected:
// its down message and its link's pool_down both come here). Its running
// commands are made visible again at once: CAF answers nothing for
// requests to a lost node, so they would otherwise wait for their
// visibility timeout. A run that still finishes on the node is
// harmless: its outcome has nowhere to go, and the next delivery owns the
// message (at least once). The pool's slots leave the credits: idle ones
// at once from the pending credits, the rest as debt paid by freed slots.
void drop_pool(self_ptr self, const std::string& address,
               const std::string& why) {
  auto& st = self->state;
  auto it = std::find_if(st.remotes.begin(), st.remotes.end(),
                         [&](auto& r) { return r.address == address; });
  if (it == st.remotes.end())
    return;
  auto slots = it->slots;
  self->demonitor(it->hdl.address());
  st.remotes.erase(it);
  std::vector<int64_t> ids;
  for (auto i = st.running.begin(); i != st.running.end();) {
    if (i->second.remote == address) {
      ids.push_back(i->second.rc->msg_id);
      cap_released(self, i->second.rc->cmd.command_type, true);
      i = st.running.erase(i);
    } else {
      ++i;
    }
  }
  auto dropped = static_cast<int64_t>(ids.size());
  st.settings.metrics->in_flight -= dropped;
  st.credits.pool_dropped(slots, dropped);
  publish_remote_slots(st);
  st.settings.metrics->remote_disconnects += 1;
  log::from(st.name).warn("{}: remote pool {} lost ({}); {} command(s) made "
                          "visible again",
                          st.name, address, why, dropped);
  release(self, std::move(ids), 0);
  if (st.draining)
    release_waiting(self, true);
  dispatch(self);
  progress(self);
}

// A remote pool connected: its slots join the credits (paying any debt of
// vanished ones first) and waiting commands of its types start there.
void add_pool(self_ptr self, const std::string& address,
              const remote::pool_offer& offer,
              const remote::handler_pool_actor& hdl) {
  auto& st = self->state;
  if (!hdl || offer.slots <= 0)
    return;
  drop_pool(self, address, "replaced by a new connection");
  self->monitor(hdl);
  supervisor_state::remote_pool r;
  r.address = address;
  r.hdl = hdl;
  r.types = offer.command_types;
  std::sort(r.types.begin(), r.types.end());
  r.slots = offer.slots;
  st.remotes.push_back(std::move(r));
  publish_remote_slots(st);
  log::from(st.name).info("{}: remote pool {} ({}) connected: {} slot(s) for "
                          "{} command type(s)",
                          st.name, address, offer.node_name, offer.slots,
                          offer.command_types.size());
  if (st.credits.freed(offer.slots))
    flush_credit(self);
  dispatch(self);
}

// Spawns the keeper of the connection to configured pool number `i`.
void add_link(self_ptr self, size_t i) {
  auto& st = self->state;
  st.links[i] = st.spawn.remote(self, st.settings,
                                st.settings.cfg->remote.pools[i]);
}

// Replaces a dead remote link (it keeps no state worth keeping); returns
// false if `source` is none of them.
bool replace_link(self_ptr self, const caf::actor_addr& source,
                  const caf::error& reason) {
  auto& st = self->state;
  for (size_t i = 0; i < st.links.size(); ++i) {
    if (!st.links[i] || st.links[i].address() != source)
      continue;
    st.links[i] = nullptr;
    if (!st.draining) {
      log::from(st.name).warn("{}: the link to remote pool {} died ({}); "
                              "replacing it",
                              st.name, st.settings.cfg->remote.pools[i],
                              to_string(reason));
      add_link(self, i);
    }
    return true;
  }
  return false;
}

// Stops reconnecting (a drain): the links end; connected pools stay until
// their running commands are done.
void stop_links(self_ptr self) {
  for (auto& link : self->state.links) {
    if (!link)
      continue;
    self->unlink_from(link);
    self->send_exit(link, caf::exit_reason::user_shutdown);
  }
}

} // namespace cmdbus::actors::supervisor_steps
