#include "cmdbus/actors/worker/admin_drain.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

admin_drain_actor::behavior_type
admin_drain(admin_drain_actor::stateful_pointer<admin_drain_state> self,
            root_actor root, std::chrono::milliseconds bound,
            std::function<void()> on_idle) {
  auto& st = self->state;
  st.root = std::move(root);
  st.on_idle = std::move(on_idle);
  st.bound = bound;
  // A stop ends the root, whose pending answer then never comes.
  self->monitor(st.root);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.root.address())
      return;
    log::from(admin_drain_state::name)
      .debug("the worker's actors ended before its drain did");
    self->quit();
  });
  self->request(st.root, caf::infinite, atom::drain::value)
    .then(
      [self](atom::done) {
        self->state.on_idle();
        self->quit();
      },
      [self](caf::error& err) {
        log::from(admin_drain_state::name)
          .debug("the worker's drain ended without an answer: {}",
                 describe(err));
        self->quit();
      });
  self->delayed_send(self, bound, atom::overdue::value);
  return {
    [self](atom::overdue) {
      log::from(admin_drain_state::name)
        .warn("worker drain: still not idle after {} ms (handlers still "
              "running or side effects not yet written); it takes no new "
              "work and stays draining until they are done",
              self->state.bound.count());
    },
  };
}

} // namespace cmdbus::actors
