#include "cmdbus/actors/worker/remote_link.hpp"

#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/middleman_actor.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/network.hpp"
#include "cmdbus/actors/remote_protocol.hpp"
#include "cmdbus/config/network_config.hpp"
#include "cmdbus/model/backoff.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace {

using self_ptr = remote_link_actor::stateful_pointer<remote_link_state>;
using clock = std::chrono::steady_clock;

// How long a connection must have lasted for its loss to restart the
// backoff from its first step.
constexpr auto stable_after = std::chrono::minutes{1};

// Schedules the next connection attempt after the backoff of the current
// number of failures.
void retry_later(self_ptr self) {
  auto& st = self->state;
  auto max = static_cast<double>(st.settings.cfg->remote.reconnect_max.count());
  auto ms = backoff::exponential(st.failures, 250.0, 2.0, max);
  ms = std::min(max, backoff::jitter(ms, 0.8, 1.2, st.rng));
  self->delayed_send(self, std::chrono::milliseconds{static_cast<int64_t>(ms)},
                     atom::connect::value);
}

// A connection attempt failed: logs it (an error the first time a reason
// appears, then quietly) and tries again later.
void failed(self_ptr self, const std::string& why) {
  auto& st = self->state;
  ++st.failures;
  if (why != st.last_error) {
    st.last_error = why;
    log::from(st.name).error("{}: cannot use remote pool {}: {}", st.name,
                             st.address, why);
  } else {
    log::from(st.name).debug("{}: remote pool {} still unavailable: {}",
                             st.name, st.address, why);
  }
  retry_later(self);
}

// The only actor of this worker a node gets to know: it takes the
// extensions of the node's handlers (handler_context::extend_visibility)
// and hands them to the supervisor, whose other messages (drain, credits,
// commits) a node must never be able to send.
remote::lease_actor::behavior_type lease_forwarder(remote::lease_actor::pointer self,
                                                   supervisor_actor parent) {
  return {
    [self, parent](atom::extend, std::vector<int64_t>& ids, int seconds,
                   bool keep_longer) {
      return self->delegate(parent, atom::extend::value, std::move(ids),
                            seconds, keep_longer);
    },
  };
}

void hello(self_ptr self, const remote::node_door_actor& door) {
  auto& st = self->state;
  if (!st.lease)
    st.lease = self->spawn<caf::linked>(lease_forwarder, st.parent);
  self
    ->request(door, st.settings.cfg->remote.connect_timeout, atom::hello::value,
              remote::effective_protocol_version(), worker_identity(),
              st.settings.domain, caf::actor_cast<caf::actor>(st.lease))
    .then(
      [self](remote::pool_offer& offer, caf::actor& session) {
        auto& st = self->state;
        // The frozen door answers the versioned session untyped: typed here,
        // once (a node of this protocol version implements it).
        auto pool = caf::actor_cast<remote::handler_pool_actor>(session);
        auto why = remote::refuse_offer(
          offer, remote::effective_protocol_version(),
          connection_timeout(st.settings.cfg->remote.heartbeat_interval));
        if (why.empty() && !pool)
          why = "the node answered without a pool";
        if (!why.empty()) {
          failed(self, why);
          return;
        }
        st.pool = pool;
        st.failures = 0;
        st.last_error.clear();
        st.connected_at = clock::now();
        self->monitor(pool);
        self->send(st.parent, atom::pool_up::value, st.address,
                   std::move(offer), std::move(pool));
      },
      [self](caf::error& err) { failed(self, describe(err)); });
}

void connect(self_ptr self) {
  auto& st = self->state;
  if (st.pool)
    return;
  auto mm = connector(self->system());
  self
    ->request(mm, st.settings.cfg->remote.connect_timeout,
              caf::connect_atom::value, st.host, st.port)
    .then(
      [self](const caf::node_id&, caf::strong_actor_ptr& ptr,
             const std::set<std::string>& ifs) {
        if (!ptr) {
          failed(self, "nothing is published on that port");
          return;
        }
        if (!is_node_door(self->system(), ifs)) {
          failed(self, "the peer is not a cmdbus handler node (its "
                       "interface differs)");
          return;
        }
        hello(self, caf::actor_cast<remote::node_door_actor>(ptr));
      },
      [self](caf::error& err) { failed(self, describe(err)); });
}

} // namespace

std::string worker_identity() {
  return config::host_name() + "/" + std::to_string(getpid());
}

remote_link_actor::behavior_type
remote_link(remote_link_actor::stateful_pointer<remote_link_state> self,
            domain_settings settings, std::string address,
            supervisor_actor parent) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.address = std::move(address);
  st.parent = std::move(parent);
  st.name = "remote/" + st.settings.domain + "/" + st.address;
  auto where = config::parse_node_address(st.address);
  st.host = where.host;
  st.port = static_cast<uint16_t>(where.port);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (!st.pool || dm.source != st.pool.address())
      return;
    st.pool = nullptr;
    if (clock::now() - st.connected_at >= stable_after)
      st.failures = 0;
    log::from(st.name).warn("{}: remote pool {} disconnected ({})", st.name,
                            st.address, to_string(dm.reason));
    self->send(st.parent, atom::pool_down::value, st.address);
    ++st.failures;
    retry_later(self);
  });
  self->send(self, atom::connect::value);
  return {
    [self](atom::connect) { connect(self); },
  };
}

remote_link_actor spawn_remote_link(supervisor_actor::pointer parent,
                                    const domain_settings& settings,
                                    const std::string& address) {
  return parent->spawn<caf::linked>(remote_link, settings, address,
                                    supervisor_actor{parent});
}

} // namespace cmdbus::actors
