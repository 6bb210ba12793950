#pragma once

// The admin actor (admin::admin_actor, frozen; actors/ops/admin.hpp
// publishes it): answers `cmdbus cluster status` with the status JSON of
// its process, and `cmdbus cluster drain` by starting a worker's drain.
// What it shows, the throughput included, comes from its process's source
// (the one sampler of the process feeds it).

#include <memory>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/ops/admin_view.hpp"

namespace cmdbus::admin {

/// State of the admin actor.
struct admin_state {
  std::shared_ptr<const source> src;
  static inline const char* name = "admin";

  /// The status JSON now.
  std::string status() const;
};

/// The admin actor's behaviour.
/// @param self The admin actor.
/// @param src What it reads from its process (and how it drains).
admin_actor::behavior_type
admin(admin_actor::stateful_pointer<admin_state> self,
      std::shared_ptr<const source> src);

} // namespace cmdbus::admin
