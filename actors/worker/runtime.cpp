#include "cmdbus/actors/worker/runtime.hpp"

#include <atomic>
#include <thread>

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/network.hpp"
#include "cmdbus/actors/worker/admin_drain.hpp"
#include "cmdbus/actors/worker/batch_counter.hpp"
#include "cmdbus/actors/worker/job_runner.hpp"
#include "cmdbus/actors/worker/root.hpp"
#include "cmdbus/actors/worker/scheduler.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/process/router.hpp"

namespace cmdbus::actors {

struct runtime::impl {
  std::shared_ptr<system_host> host;
  root_actor root;
  scheduler_actor scheduler;
  /// The singleton job runner, when jobs are registered.
  job_runner_actor jobs;
  std::atomic<bool> stopped{false};
  std::shared_future<void> gone;
};

runtime::runtime(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

std::shared_ptr<runtime>
runtime::start(std::vector<domain_settings> domains,
               std::vector<batch_callback> callbacks,
               batch_delivery_settings delivery,
               std::vector<process_settings> processes,
               std::shared_ptr<const scheduler_settings> schedules,
               std::shared_ptr<schedule_store> schedule_db) {
  host_settings hs;
  // The network (middleman, and OpenSSL with certificates) only when a
  // domain has remote handler pools: a plain worker starts no network
  // thread. Every domain shares the worker's configuration.
  if (!domains.empty() && !domains.front().cfg->remote.pools.empty()) {
    const auto& cfg = *domains.front().cfg;
    hs.network = network_settings{cfg.remote.heartbeat_interval, cfg.tls};
  }
  auto ptr = std::make_unique<impl>();
  try {
    ptr->host = system_host::start(hs);
  } catch (const config::config_error&) {
    throw;
  } catch (const std::runtime_error& e) {
    // CAF's OpenSSL module throws when it cannot load the certificate set.
    throw config::config_error(e.what());
  }
  ptr->gone = ptr->host->gone();
  auto& sys = ptr->host->system();
  ptr->root = sys.spawn(
    root, std::move(domains), spawn_supervisor,
    [callbacks = std::move(callbacks),
     delivery = std::move(delivery)](root_actor::pointer parent) {
      return spawn_batch_counter(parent, callbacks, delivery);
    },
    std::move(processes),
    [](root_actor::pointer parent, const process_settings& s) {
      auto router = spawn_process_router(parent->system(), s);
      parent->link_to(router);
      return router;
    });
  if (schedules && schedule_db && !schedules->domains.empty())
    ptr->scheduler = spawn_scheduler(sys, ptr->root, *schedules,
                                     std::move(schedule_db));
  release_thread_logger();
  return std::shared_ptr<runtime>{new runtime(std::move(ptr))};
}

runtime::~runtime() {
  stop(caf::exit_reason::user_shutdown);
  impl_->root = nullptr;
  impl_->scheduler = nullptr;
  impl_->jobs = nullptr;
  // The host destroys the system on a thread of its own.
  impl_->host.reset();
}

void runtime::start_jobs(job_runner_settings settings) {
  impl_->jobs = spawn_job_runner(impl_->host->system(), std::move(settings));
  release_thread_logger();
}

bool runtime::drain(std::chrono::milliseconds timeout) {
  bool all = true;
  {
    caf::scoped_actor self{impl_->host->system()};
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

void runtime::drain_then(std::chrono::milliseconds bound,
                         std::function<void()> on_idle) {
  impl_->host->system().spawn(admin_drain, impl_->root, bound,
                              std::move(on_idle));
  release_thread_logger();
}

void runtime::stop(caf::exit_reason reason) {
  if (impl_->stopped.exchange(true))
    return;
  caf::anon_send_exit(impl_->root, reason);
  if (impl_->scheduler)
    caf::anon_send_exit(impl_->scheduler, reason);
  if (impl_->jobs)
    caf::anon_send_exit(impl_->jobs, reason);
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
