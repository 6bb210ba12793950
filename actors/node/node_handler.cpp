#include "cmdbus/actors/node/node_handler.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/worker/handler.hpp"

namespace cmdbus::actors {

namespace {

outcome decode_failure(const std::string& what) {
  outcome out;
  out.kind = outcome_kind::permanent;
  out.error_code = "REMOTE_DECODE_ERROR";
  out.error_message = what;
  return out;
}

} // namespace

node_handler_actor::behavior_type
node_handler(node_handler_actor::stateful_pointer<node_handler_state> self,
             node_settings settings, std::string domain) {
  self->state.settings = std::move(settings);
  self->state.domain = std::move(domain);
  return {
    [self](atom::handle, remote::wire_command& wc,
           remote::lease_actor& lease) -> remote::wire_outcome {
      auto& st = self->state;
      auto started = std::chrono::steady_clock::now();
      std::shared_ptr<const received_command> rc;
      try {
        if (wc.domain != st.domain)
          throw decode_error("a command of domain '" + wc.domain
                             + "' reached the handlers of domain '" + st.domain
                             + "'");
        rc = std::make_shared<const received_command>(remote::from_wire(wc));
      } catch (const std::exception& e) {
        return remote::to_wire(decode_failure(e.what()));
      }
      auto live = std::make_shared<std::atomic<bool>>(true);
      handler_context ctx{rc,
                          make_extender(&self->system(), lease, rc->msg_id,
                                        handler_mode::blocking,
                                        st.settings.extend_timeout, live),
                          st.settings.cancelled};
      auto out = st.settings.registry->run(*rc, ctx);
      live->store(false);
      return remote::to_wire(out, std::chrono::steady_clock::now() - started);
    },
  };
}

} // namespace cmdbus::actors
