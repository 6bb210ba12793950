#include "cmdbus/actors/node/pool.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/node/node_handler.hpp"

namespace cmdbus::actors {

namespace {

using self_ptr = node_pool_actor::stateful_pointer<node_pool_state>;

void finish_drain(self_ptr self) {
  auto& st = self->state;
  if (!st.draining || st.running > 0 || !st.queue.empty())
    return;
  for (auto& rp : st.drained)
    rp.deliver(atom::done::value);
  st.drained.clear();
}

// Hands queued deliveries to idle handlers.
void dispatch(self_ptr self) {
  auto& st = self->state;
  while (!st.idle.empty() && !st.queue.empty()) {
    auto h = st.idle.back();
    st.idle.pop_back();
    auto job = std::move(st.queue.front());
    st.queue.pop_front();
    st.settings.counters->queued -= 1;
    st.settings.counters->busy += 1;
    st.running += 1;
    auto rp = job.promise;
    auto release = [self, h] {
      auto& st = self->state;
      st.idle.push_back(h);
      st.running -= 1;
      st.settings.counters->busy -= 1;
      st.settings.counters->completed += 1;
      dispatch(self);
      finish_drain(self);
    };
    self
      ->request(h, caf::infinite, atom::handle::value, std::move(job.cmd),
                std::move(job.lease))
      .then(
        [rp, release](remote::wire_outcome& out) mutable {
          rp.deliver(std::move(out));
          release();
        },
        [self, rp, release](caf::error& err) mutable {
          // The handler thread died (it never should: run() catches every
          // exception): the command runs again.
          outcome out;
          out.kind = outcome_kind::transient;
          out.error_code = "HANDLER_NODE_FAILED";
          out.error_message = "the handler on node '"
                              + self->state.settings.name->get()
                              + "' failed: " + describe(err);
          rp.deliver(remote::to_wire(out));
          release();
        });
  }
}

} // namespace

node_handler_actor spawn_node_handler(node_pool_actor::pointer pool,
                                      const node_settings& settings,
                                      const std::string& domain) {
  return pool->spawn<caf::detached + caf::linked>(node_handler, settings,
                                                  domain);
}

node_pool_actor::behavior_type
node_pool(node_pool_actor::stateful_pointer<node_pool_state> self,
          node_settings settings, std::string domain,
          node_handler_spawner spawn) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.domain = std::move(domain);
  for (int i = 0; i < st.settings.concurrency; ++i)
    st.idle.push_back(spawn(self, st.settings, st.domain));
  return {
    [self](atom::handle, remote::wire_command& cmd,
           remote::lease_actor& lease) -> caf::result<remote::wire_outcome> {
      auto& st = self->state;
      if (st.draining)
        return caf::make_error(ec::remote_unavailable,
                               "handler node '" + st.settings.name->get()
                                 + "' is stopping");
      auto rp = self->make_response_promise<remote::wire_outcome>();
      st.queue.push_back({std::move(cmd), std::move(lease), rp});
      st.settings.counters->queued += 1;
      dispatch(self);
      return rp;
    },
    [self](atom::drain) -> caf::result<atom::done> {
      auto& st = self->state;
      st.draining = true;
      auto rp = self->make_response_promise<atom::done>();
      st.drained.push_back(rp);
      finish_drain(self);
      return rp;
    },
  };
}

} // namespace cmdbus::actors
