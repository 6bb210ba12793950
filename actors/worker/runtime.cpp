#include "cmdbus/actors/worker/runtime.hpp"

#include <atomic>
#include <thread>

#include <caf/all.hpp>

#include "cmdbus/actors/worker/batch_counter.hpp"
#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/network.hpp"
#include "cmdbus/actors/worker/root.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/process/router.hpp"

namespace cmdbus::actors {

void release_thread_logger() noexcept {
  caf::logger::set_current_actor_system(nullptr);
}

struct runtime::impl {
  /// Owned apart from the system: the system refers to it until its
  /// destruction ends.
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  root_actor root;
  std::atomic<bool> stopped{false};
  std::promise<void> done;
  std::shared_future<void> gone = done.get_future().share();
};

runtime::runtime(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

std::shared_ptr<runtime>
runtime::start(std::vector<domain_settings> domains,
               std::vector<batch_callback> callbacks,
               batch_delivery_settings delivery,
               std::shared_ptr<worker_counters> counters,
               std::vector<process_settings> processes) {
  auto ptr = std::make_unique<impl>();
  ptr->cfg = std::make_unique<caf::actor_system_config>();
  // The scheduled actors (root, domain supervisors, non-blocking handlers)
  // are light; the database work happens in detached actors. Work sharing
  // lets idle scheduler threads block on a condition variable, where work
  // stealing polls with 50 us sleeps (about a quarter of the worker's CPU
  // under load, measured).
  ptr->cfg->set("scheduler.max-threads", 2);
  ptr->cfg->set("scheduler.policy", caf::atom("sharing"));
  add_error_category(*ptr->cfg);
  // The network (middleman, and OpenSSL with certificates) only when a
  // domain has remote handler pools: a plain worker starts no network
  // thread. Every domain shares the worker's configuration.
  if (!domains.empty() && !domains.front().cfg->remote.pools.empty()) {
    const auto& cfg = *domains.front().cfg;
    network_settings net;
    net.heartbeat = cfg.remote.heartbeat_interval;
    net.tls = cfg.tls;
    configure_network(*ptr->cfg, net);
  }
  try {
    ptr->sys = std::make_unique<caf::actor_system>(*ptr->cfg);
  } catch (const std::exception& e) {
    // CAF's OpenSSL module throws when it cannot load the certificate set.
    throw config::config_error(std::string{"cannot start the actor system: "}
                               + e.what());
  }
  ptr->root = ptr->sys->spawn(
    root, std::move(domains), spawn_supervisor,
    [callbacks = std::move(callbacks), delivery = std::move(delivery),
     counters = std::move(counters)](root_actor::pointer parent) {
      return spawn_batch_counter(parent, callbacks, delivery, counters);
    },
    std::move(processes),
    [](root_actor::pointer parent, const process_settings& s) {
      auto router = spawn_process_router(parent->system(), s);
      parent->link_to(router);
      return router;
    });
  release_thread_logger();
  return std::shared_ptr<runtime>{new runtime(std::move(ptr))};
}

runtime::~runtime() {
  stop(caf::exit_reason::user_shutdown);
  auto ptr = std::move(impl_);
  ptr->root = nullptr;
  // ~actor_system waits for every actor to end, which a handler stuck in
  // application code can delay for good: never on the caller's thread.
  std::thread([ptr = std::move(ptr)]() mutable {
    ptr->sys.reset();
    ptr->cfg.reset();
    ptr->done.set_value();
  }).detach();
}

bool runtime::drain(std::chrono::milliseconds timeout) {
  bool all = true;
  {
    caf::scoped_actor self{*impl_->sys};
    self->request(impl_->root, timeout, atom::drain::value)
      .receive([](atom::done) {},
               [&](caf::error& err) {
                 all = false;
                 log::warn("worker drain incomplete: {}", describe(err));
               });
  }
  release_thread_logger();
  return all;
}

void runtime::stop(caf::exit_reason reason) {
  if (impl_->stopped.exchange(true))
    return;
  caf::anon_send_exit(impl_->root, reason);
  release_thread_logger();
}

std::shared_future<void> runtime::gone() const {
  return impl_->gone;
}

bool retire(std::shared_ptr<runtime> rt, std::chrono::milliseconds grace) {
  if (!rt)
    return true;
  auto gone = rt->gone();
  rt.reset();
  return gone.wait_for(grace) == std::future_status::ready;
}

} // namespace cmdbus::actors
