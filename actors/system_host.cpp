#include "cmdbus/actors/system_host.hpp"

#include <stdexcept>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/logger.hpp>

#include "cmdbus/actors/errors.hpp"

namespace cmdbus::actors {

struct system_host::impl {
  /// Owned apart from the system: the system refers to it until its
  /// destruction ends.
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::promise<void> done;
  std::shared_future<void> gone = done.get_future().share();
};

system_host::system_host(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

std::shared_ptr<system_host> system_host::start(const host_settings& settings) {
  auto ptr = std::make_unique<impl>();
  ptr->cfg = std::make_unique<caf::actor_system_config>();
  // Our actors are light or detached (the database work and blocking
  // handlers run on threads of their own). Work sharing lets idle scheduler
  // threads block on a condition variable, where work stealing polls with
  // 50 us sleeps (about a quarter of a worker's CPU under load, measured).
  ptr->cfg->set("scheduler.max-threads", settings.threads);
  ptr->cfg->set("scheduler.policy", caf::atom("sharing"));
  if (settings.network)
    configure_network(*ptr->cfg, *settings.network);
  else
    add_error_category(*ptr->cfg);
  try {
    ptr->sys = std::make_unique<caf::actor_system>(*ptr->cfg);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string{"cannot start the actor system: "}
                             + e.what());
  }
  return std::shared_ptr<system_host>{new system_host(std::move(ptr))};
}

system_host::~system_host() {
  release_thread_logger();
  std::thread([ptr = std::move(impl_)]() mutable {
    ptr->sys.reset();
    ptr->cfg.reset();
    ptr->done.set_value();
  }).detach();
}

caf::actor_system& system_host::system() noexcept {
  return *impl_->sys;
}

std::shared_future<void> system_host::gone() const {
  return impl_->gone;
}

bool retire(std::shared_ptr<system_host> host,
            std::chrono::milliseconds grace) {
  if (!host)
    return true;
  auto gone = host->gone();
  host.reset();
  return gone.wait_for(grace) == std::future_status::ready;
}

void release_thread_logger() noexcept {
  caf::logger::set_current_actor_system(nullptr);
}

} // namespace cmdbus::actors
