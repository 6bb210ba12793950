#include "cmdbus/actors/actor_handler.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/system_host.hpp"

namespace cmdbus {

void add_actor_handler(handler_registry& registry, const std::string& domain,
                       const std::string& command_type, caf::actor_system& sys,
                       command_handler_actor hdl,
                       std::chrono::milliseconds timeout) {
  auto* system = &sys;
  registry.add(
    domain, command_type,
    [system, hdl, timeout](const command& cmd, handler_context& ctx) -> json {
      received_command rc;
      rc.cmd = cmd;
      rc.attempt = ctx.attempt();
      rc.max_attempts = ctx.max_attempts();
      rc.msg_id = ctx.msg_id();
      outcome out;
      caf::error failure;
      {
        caf::scoped_actor self{*system};
        self->request(hdl, timeout, atom::handle::value, rc)
          .receive([&](outcome& x) { out = std::move(x); },
                   [&](caf::error& err) {
                     failure = caf::make_error(actors::ec::handler_failed,
                                               actors::describe(err));
                   });
      }
      // The handler thread keeps no reference to the system's logger.
      actors::release_thread_logger();
      if (failure)
        actors::throw_error(failure, "the handler actor did not answer");
      switch (out.kind) {
        case outcome_kind::success: return out.result;
        case outcome_kind::transient:
          throw transient_command_error(out.error_code, out.error_message,
                                        out.error_details);
        case outcome_kind::permanent:
          throw permanent_command_error(out.error_code, out.error_message,
                                        out.error_details);
        case outcome_kind::business_rule:
          throw business_rule_error(out.error_code, out.error_message,
                                    out.error_details);
      }
      return out.result;
    });
}

} // namespace cmdbus
