#include "cmdbus/actors/worker/handler.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/system_host.hpp"

namespace cmdbus::actors {

handler_context::extender
make_extender(caf::actor_system* sys, remote::lease_actor lease,
              int64_t msg_id, handler_mode mode,
              std::chrono::milliseconds timeout,
              std::shared_ptr<const std::atomic<bool>> live) {
  return [sys, lease, msg_id, mode, timeout, live](std::chrono::seconds secs) {
    if (!live->load())
      throw command_bus_error("extend_visibility after the handler returned: "
                              "the delivery has ended");
    auto ids = std::vector<int64_t>{msg_id};
    auto seconds = static_cast<int>(secs.count());
    if (mode == handler_mode::non_blocking) {
      caf::anon_send(lease, atom::extend::value, std::move(ids), seconds,
                     false);
      return;
    }
    caf::error failure;
    {
      caf::scoped_actor tmp{*sys};
      tmp
        ->request(lease, timeout, atom::extend::value, std::move(ids), seconds,
                  false)
        .receive([](int) {}, [&](caf::error& err) { failure = err; });
    }
    // A thread of the application keeps no reference to the system's
    // logger (see actors/system_host.hpp).
    release_thread_logger();
    if (failure)
      throw_error(failure, "extend_visibility failed");
  };
}

handler_actor::behavior_type
handler(handler_actor::stateful_pointer<handler_state> self,
        domain_settings settings, supervisor_actor supervisor,
        handler_mode mode) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.supervisor = std::move(supervisor);
  st.mode = mode;
  st.name = "handler/" + st.settings.domain;
  return {
    [self](atom::handle, command_ptr rc) {
      auto& st = self->state;
      // A blocking extension waits at most for one statement of the retry
      // scheduler, plus its own queueing.
      auto timeout = st.settings.cfg->statement_timeout
                     + std::chrono::seconds{5};
      auto live = std::make_shared<std::atomic<bool>>(true);
      handler_context ctx{rc,
                          make_extender(&self->system(),
                                        caf::actor_cast<remote::lease_actor>(
                                          st.supervisor),
                                        rc->msg_id, st.mode, timeout, live),
                          st.settings.cancelled};
      auto out = st.settings.registry->run(*rc, ctx);
      live->store(false);
      return out;
    },
  };
}

handler_actor spawn_handler(supervisor_actor::pointer parent,
                            const domain_settings& settings,
                            handler_mode mode) {
  auto sup = supervisor_actor{parent};
  if (mode == handler_mode::non_blocking)
    return parent->spawn<caf::linked>(handler, settings, std::move(sup), mode);
  return parent->spawn<caf::detached + caf::linked>(handler, settings,
                                                    std::move(sup), mode);
}

} // namespace cmdbus::actors
