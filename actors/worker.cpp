#include "actors/worker.hpp"

#include <stdexcept>
#include <thread>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/runtime.hpp"
#include "db/connection.hpp"
#include "db/queue_name.hpp"

namespace cmdbus {

namespace {

// CAF keeps a reference to its logger in a thread-local of every thread
// that spawned or messaged actors, and ~actor_system waits until the logger
// is gone. Threads of the application (start() and stop() may run on
// different ones) drop that reference when they are done with the system,
// or destroying it from another thread would wait forever.
void release_thread_logger() {
  caf::logger::set_current_actor_system(nullptr);
}

} // namespace

struct worker::impl {
  config::worker_config cfg;
  std::shared_ptr<const handler_registry> registry;
  std::shared_ptr<worker_counters> counters
    = std::make_shared<worker_counters>();
  std::shared_ptr<std::atomic<bool>> cancelled
    = std::make_shared<std::atomic<bool>>(false);
  std::vector<batch_callback> callbacks;
  caf::actor_system_config sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor root;
  caf::actor counter;
  std::atomic<bool> running{false};
  std::mutex mtx;

  actors::domain_settings settings_for(const std::string& domain,
                                       bool tick) const {
    actors::domain_settings s;
    s.dsn = cfg.dsn;
    s.domain = domain;
    s.concurrency = cfg.concurrency;
    s.prefetch = cfg.prefetch;
    s.visibility_timeout = cfg.visibility_timeout;
    s.poll_interval = cfg.poll_interval;
    s.use_notify = cfg.use_notify;
    s.statement_timeout = cfg.statement_timeout;
    s.flush_interval = cfg.flush_interval;
    s.retry = cfg.retry;
    s.tick = tick;
    s.counters = counters;
    s.registry = registry;
    s.cancelled = cancelled;
    s.batch_counter = counter;
    s.record_batches = !callbacks.empty();
    s.domain_in_flight = std::make_shared<std::atomic<int64_t>>(0);
    return s;
  }

  void launch(bool tick) {
    std::lock_guard<std::mutex> guard{mtx};
    if (running)
      throw std::logic_error("worker already started");
    // Queues are created on demand (D10) before anything polls them.
    {
      db::connection_options opts;
      opts.application_name = "cmdbus-worker";
      auto conn = db::connection::open(cfg.dsn, opts);
      for (auto& d : cfg.domains)
        conn.query("SELECT pgmq.create($1)", db::command_queue(d));
    }
    cancelled->store(false);
    // The scheduled actors (root, domain supervisors) are few and light;
    // the work happens in detached actors. Work sharing lets idle
    // scheduler threads block on a condition variable, where work
    // stealing polls with 50 us sleeps (about a quarter of the worker's
    // CPU under load, measured).
    sys_cfg.set("scheduler.max-threads", 2);
    sys_cfg.set("scheduler.policy", caf::atom("sharing"));
    sys = std::make_unique<caf::actor_system>(sys_cfg);
    actors::batch_delivery_settings delivery;
    delivery.dsn = cfg.dsn;
    delivery.domains = cfg.domains;
    delivery.statement_timeout = cfg.statement_timeout;
    counter = sys->spawn<caf::detached>(actors::batch_counter, callbacks,
                                        std::move(delivery), counters);
    std::vector<actors::domain_settings> domains;
    for (auto& d : cfg.domains)
      domains.push_back(settings_for(d, tick));
    auto children = actors::default_spawners();
    root = sys->spawn(actors::root, std::move(domains),
                      [children](caf::event_based_actor* parent,
                                 const actors::domain_settings& s) {
                        return parent->spawn(actors::supervisor, s, children);
                      });
    running = true;
    release_thread_logger();
    spdlog::info("worker started for {} domain(s), concurrency {}",
                 cfg.domains.size(), cfg.concurrency);
  }

  // Asks every domain to drain; returns whether all confirmed in time.
  bool drain(std::chrono::milliseconds timeout) {
    auto cleanup = caf::detail::make_scope_guard(release_thread_logger);
    caf::scoped_actor self{*sys};
    bool all = true;
    self->request(root, timeout, atom::drain::value)
      .receive([](atom::done) {},
               [&](caf::error& err) {
                 all = false;
                 spdlog::warn("worker drain incomplete: {}", to_string(err));
               });
    return all;
  }

  // Stops every actor. With `wait`, returns once all are gone; otherwise
  // (handlers may still be inside user code, which nothing can interrupt)
  // a background thread destroys the actor system when they return, and
  // their commands reappear after the visibility timeout.
  void shutdown(caf::exit_reason reason, bool wait) {
    std::lock_guard<std::mutex> guard{mtx};
    if (!sys)
      return;
    cancelled->store(true);
    caf::anon_send_exit(root, reason);
    caf::anon_send_exit(counter, reason);
    release_thread_logger();
    root = caf::actor{};
    counter = caf::actor{};
    if (wait)
      sys.reset();
    else
      std::thread([s = std::move(sys)]() mutable { s.reset(); }).detach();
    running = false;
  }
};

worker::worker(config::worker_config cfg, handler_registry registry)
  : impl_(std::make_unique<impl>()) {
  auto problems = config::validate(cfg);
  if (!problems.empty())
    throw std::invalid_argument("invalid worker configuration: "
                                + problems.front());
  impl_->cfg = std::move(cfg);
  impl_->registry
    = std::make_shared<const handler_registry>(std::move(registry));
}

worker::~worker() {
  stop_now();
}

void worker::start() {
  impl_->launch(false);
}

std::future<void> worker::stop(std::chrono::milliseconds timeout) {
  return std::async(std::launch::async, [this, timeout] {
    if (!impl_->running)
      return;
    impl_->cancelled->store(true);
    auto drained = impl_->drain(timeout);
    if (!drained)
      spdlog::warn("worker stop: in-flight commands did not finish within {} "
                   "ms; they reappear after their visibility timeout",
                   timeout.count());
    impl_->shutdown(caf::exit_reason::user_shutdown, drained);
  });
}

void worker::stop_now() {
  impl_->shutdown(caf::exit_reason::kill, in_flight_count() == 0);
}

bool worker::is_running() const noexcept {
  return impl_->running;
}

size_t worker::in_flight_count() const noexcept {
  auto n = impl_->counters->in_flight.load();
  return n > 0 ? static_cast<size_t>(n) : 0;
}

const std::string& worker::domain() const noexcept {
  return impl_->cfg.domains.front();
}

worker_stats worker::stats() const noexcept {
  auto& c = *impl_->counters;
  return {c.in_flight.load(),        c.received.load(),
          c.completed.load(),        c.retried.load(),
          c.moved_to_tsq.load(),     c.failed.load(),
          c.rejected.load(),         c.handler_restarts.load(),
          c.db_errors.load()};
}

void worker::on_batch_complete(batch_callback cb) {
  if (impl_->running)
    throw std::logic_error("register batch callbacks before start()");
  impl_->callbacks.push_back(std::move(cb));
}

worker_stats worker::run_tick(std::chrono::milliseconds timeout) {
  impl_->launch(true);
  auto drained = impl_->drain(timeout);
  if (!drained)
    spdlog::warn("tick: not everything finished within {} ms",
                 timeout.count());
  impl_->shutdown(caf::exit_reason::user_shutdown, drained);
  return stats();
}

} // namespace cmdbus
