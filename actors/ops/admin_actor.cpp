#include "cmdbus/actors/ops/admin_actor.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::admin {

namespace {

caf::error version_refusal(int32_t version) {
  return caf::make_error(
    actors::ec::protocol_mismatch,
    "the admin actor speaks admin protocol " + std::to_string(protocol_version)
      + ", the request " + std::to_string(version));
}

} // namespace

std::string admin_state::status() const {
  return status_json(*src, src->read());
}

admin_actor::behavior_type
admin(admin_actor::stateful_pointer<admin_state> self,
      std::shared_ptr<const source> src) {
  self->state.src = std::move(src);
  return {
    [self](atom::status, int32_t version) -> caf::result<std::string> {
      if (version != protocol_version)
        return version_refusal(version);
      return self->state.status();
    },
    [self](atom::drain, int32_t version) -> caf::result<std::string> {
      auto& st = self->state;
      if (version != protocol_version)
        return version_refusal(version);
      if (!st.src->drain)
        return caf::make_error(actors::ec::unsupported,
                               "a handler node takes no work of its own: "
                               "drain the workers that use it");
      log::from(admin_state::name)
        .info("drain requested through the admin port");
      st.src->drain();
      return st.status();
    },
  };
}

} // namespace cmdbus::admin
