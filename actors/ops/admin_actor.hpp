#pragma once

// The admin actor (admin::admin_actor, frozen; actors/ops/admin.hpp
// publishes it): answers `cmdbus cluster status` with the status JSON of
// its process, and `cmdbus cluster drain` by starting a worker's drain.
// It samples the handled counts every second for the throughput over the
// last minute.

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/ops/admin.hpp"

namespace cmdbus::admin {

/// State of the admin actor.
struct admin_state {
  /// The handled counts at one moment.
  struct sample {
    std::chrono::steady_clock::time_point at;
    int64_t total = 0;
    std::vector<int64_t> domains;
  };
  std::shared_ptr<const source> src;
  /// Oldest first, spanning at most throughput_window.
  std::deque<sample> samples;
  static inline const char* name = "admin";

  /// How often the counts are sampled, and how far back the throughput
  /// looks.
  static constexpr auto sample_every = std::chrono::seconds{1};
  static constexpr auto throughput_window = std::chrono::seconds{60};

  /// Adds `s` and forgets what is older than the window.
  void remember(sample s);

  /// The status JSON now.
  std::string status();
};

/// The admin actor's behaviour.
/// @param self The admin actor.
/// @param src What it reads from its process (and how it drains).
admin_impl_actor::behavior_type
admin(admin_impl_actor::stateful_pointer<admin_state> self,
      std::shared_ptr<const source> src);

} // namespace cmdbus::admin
