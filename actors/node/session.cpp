#include "cmdbus/actors/node/session.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

session_state::~session_state() {
  if (settings.counters)
    settings.counters->sessions -= 1;
}

remote::handler_pool_actor::behavior_type
session(remote::handler_pool_actor::stateful_pointer<session_state> self,
        node_settings settings, node_pool_actor pool, remote::lease_actor lease,
        std::string worker, std::string domain) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.pool = std::move(pool);
  st.lease = std::move(lease);
  st.worker = std::move(worker);
  st.domain = std::move(domain);
  st.settings.counters->sessions += 1;
  self->monitor(st.lease);
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    if (msg.source != st.lease.address())
      return;
    log::from("node-session/" + st.domain)
      .info("worker '{}' (domain {}) disconnected: {}", st.worker, st.domain,
            describe(msg.reason));
    self->quit(caf::exit_reason::normal);
  });
  return {
    [self](atom::handle, remote::wire_command& cmd) {
      auto& st = self->state;
      return self->delegate(st.pool, atom::handle::value, std::move(cmd),
                            st.lease);
    },
  };
}

} // namespace cmdbus::actors
