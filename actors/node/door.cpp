#include "cmdbus/actors/node/door.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/node/session.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

remote::node_door_actor::behavior_type
door(remote::node_door_actor::stateful_pointer<door_state> self,
     node_settings settings, std::map<std::string, node_pool_actor> pools) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.pools = std::move(pools);
  for (auto& [domain, pool] : st.pools)
    self->link_to(pool);
  return {
    [self](atom::hello, int32_t version, std::string& worker,
           std::string& domain,
           caf::actor& lease) -> caf::result<remote::pool_offer, caf::actor> {
      auto& st = self->state;
      auto name = st.settings.name->get();
      auto mine = remote::effective_protocol_version();
      auto lg = log::from(door_state::name);
      if (version != mine) {
        lg.error("refused worker '{}' (domain {}): it speaks protocol {}, this "
                 "node speaks {}",
                 worker, domain, version, mine);
        return caf::make_error(ec::protocol_mismatch,
                               "handler node '" + name + "' speaks protocol "
                                 + std::to_string(mine) + ", the worker speaks "
                                 + std::to_string(version));
      }
      auto it = st.pools.find(domain);
      if (it == st.pools.end()) {
        std::string served;
        for (auto& kv : st.pools)
          served += (served.empty() ? "" : ", ") + kv.first;
        lg.warn("refused worker '{}': this node does not serve domain '{}' "
                "(it serves {})",
                worker, domain, served);
        return caf::make_error(ec::unknown_domain,
                               "handler node '" + name
                                 + "' does not serve domain '" + domain
                                 + "' (it serves " + served + ")");
      }
      if (!lease)
        return caf::make_error(ec::remote_unavailable,
                               "hello without a lease actor");
      // The frozen hello carries the versioned lease interface untyped:
      // typed here, once (a worker of this protocol version implements it).
      auto s = self->spawn<caf::linked>(
        session, st.settings, it->second,
        caf::actor_cast<remote::lease_actor>(lease), worker, domain);
      remote::pool_offer offer;
      offer.protocol = mine;
      offer.node_name = name;
      offer.command_types = command_types(*st.settings.registry, domain);
      offer.slots = st.settings.concurrency;
      offer.heartbeat_ms = st.settings.heartbeat_ms;
      lg.info("worker '{}' connected for domain {} ({} slots)", worker, domain,
              offer.slots);
      return caf::result<remote::pool_offer, caf::actor>{
        std::move(offer), caf::actor_cast<caf::actor>(s)};
    },
  };
}

} // namespace cmdbus::actors
