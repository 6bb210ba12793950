#include "cmdbus/actors/worker.hpp"

#include <cctype>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "cmdbus/actors/ops/admin.hpp"
#include "cmdbus/actors/worker/batch_counter.hpp"
#include "cmdbus/actors/ops/counters.hpp"
#include "cmdbus/actors/ops/http_endpoint.hpp"
#include "cmdbus/actors/worker/remote_link.hpp"
#include "cmdbus/actors/worker/runtime.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/model/version.hpp"
#include "cmdbus/process/router.hpp"

namespace cmdbus {

namespace {

/// How long stop_now() and the destructor wait for the actors to end
/// before leaving the rest to a background thread.
constexpr auto stop_now_grace = std::chrono::seconds{1};

// "HEALTHY" -> "healthy" (the admin JSON's spelling).
std::string lowercase(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

} // namespace

// Shared with the tasks of stop(), so that a future that outlives the
// worker never touches freed memory.
struct worker::impl {
  config::worker_config cfg;
  std::shared_ptr<const handler_registry> registry;
  std::shared_ptr<const process_registry> processes
    = std::make_shared<const process_registry>();
  std::shared_ptr<worker_counters> counters
    = std::make_shared<worker_counters>();
  std::shared_ptr<std::atomic<bool>> cancelled
    = std::make_shared<std::atomic<bool>>(false);
  std::vector<batch_callback> callbacks;
  std::atomic<bool> running{false};
  /// Per configured domain (same order) its health inputs, kept across
  /// restarts of the worker.
  std::vector<std::shared_ptr<domain_health_counters>> health;
  /// Per configured domain its metrics, kept across restarts.
  std::vector<std::shared_ptr<domain_metrics>> metrics;
  std::chrono::steady_clock::time_point started_at;

  /// Guards `rt`: the one place where the running actors are handed from
  /// start to exactly one stopper.
  std::mutex mtx;
  std::shared_ptr<actors::runtime> rt;
  /// The HTTP endpoint while the worker runs (and drains), when configured.
  std::unique_ptr<http_endpoint> http;
  /// The admin actor while the worker runs (and drains), when configured.
  std::unique_ptr<admin::server> admin_port;
  /// A drain asked through the admin actor: 0 none, 1 draining, 2 drained
  /// (the worker takes no new work until it is stopped and started again).
  std::atomic<int> admin_drain{0};
  /// This object, for the admin's drain thread (set by the constructor).
  std::weak_ptr<impl> self_ref;

  actors::domain_settings
  settings_for(const std::string& domain, bool tick,
               std::shared_ptr<const config::worker_config> shared) const {
    actors::domain_settings s;
    s.domain = domain;
    s.cfg = std::move(shared);
    s.tick = tick;
    s.record_batches = !callbacks.empty();
    s.counters = counters;
    s.registry = registry;
    s.cancelled = cancelled;
    for (size_t i = 0; i < cfg.domains.size(); ++i)
      if (cfg.domains[i] == domain) {
        s.health = health[i];
        s.metrics = metrics[i];
      }
    // The domain's in-flight figure is its metric (shared ownership).
    s.metrics->in_flight.store(0);
    s.domain_in_flight = std::shared_ptr<std::atomic<int64_t>>(
      s.metrics, &s.metrics->in_flight);
    return s;
  }

  actors::process_settings process_settings_for(
    const std::string& domain, const std::string& queue,
    std::shared_ptr<const config::worker_config> shared) const {
    actors::process_settings s;
    s.domain = domain;
    s.queue = queue;
    s.types = processes->types(domain);
    // One router per domain sweeps for processes waiting for the TSQ.
    s.sweep_tsq = queue == process_reply_queue(domain);
    s.cfg = std::move(shared);
    s.registry = processes;
    s.counters = counters;
    for (size_t i = 0; i < cfg.domains.size(); ++i)
      if (cfg.domains[i] == domain)
        s.health = health[i];
    s.max_in_flight = std::max(16, cfg.concurrency + cfg.prefetch);
    return s;
  }

  void launch(bool tick) {
    std::lock_guard<std::mutex> guard{mtx};
    if (rt)
      throw std::logic_error("worker already started");
    // The endpoint listens first: a port that is taken starts nothing.
    // (Its threads read started_at: set before they run.)
    started_at = std::chrono::steady_clock::now();
    std::unique_ptr<http_endpoint> endpoint;
    if (!cfg.http.empty() && !tick)
      endpoint = std::make_unique<http_endpoint>(
        config::parse_http_address(cfg.http), status_source_of());
    std::unique_ptr<admin::server> admin_server;
    if (!cfg.admin.empty() && !tick)
      admin_server = std::make_unique<admin::server>(
        admin_source(), cfg.admin,
        actors::network_settings{cfg.remote.heartbeat_interval, cfg.tls});
    // Queues are created on demand before anything polls them.
    // Each on the database of its domain.
    {
      db::connection_options opts;
      opts.application_name = "cmdbus-worker";
      for (auto& group : config::group_by_dsn(cfg, cfg.domains)) {
        auto conn = db::connection::open(group.dsn, opts);
        for (auto& d : group.domains)
          conn.query("SELECT pgmq.create($1)", db::command_queue(d));
      }
      for (auto& group : config::group_by_dsn(cfg, processes->domains())) {
        auto conn = db::connection::open(group.dsn, opts);
        for (auto& d : group.domains)
          for (auto& q : processes->reply_queues(d))
            conn.query("SELECT pgmq.create($1)", q);
      }
    }
    cancelled->store(false);
    admin_drain.store(0);
    clear_health();
    set_poller_stale_limit(tick);
    auto shared = std::make_shared<const config::worker_config>(cfg);
    actors::batch_delivery_settings delivery;
    delivery.cfg = shared;
    std::vector<actors::domain_settings> domains;
    for (auto& d : cfg.domains)
      domains.push_back(settings_for(d, tick, shared));
    std::vector<actors::process_settings> routers;
    for (auto& d : processes->domains())
      for (auto& q : processes->reply_queues(d))
        routers.push_back(process_settings_for(d, q, shared));
    rt = actors::runtime::start(std::move(domains), callbacks,
                                std::move(delivery), counters,
                                std::move(routers));
    running = true;
    http = std::move(endpoint);
    admin_port = std::move(admin_server);
    log::info("worker started for {} domain(s), concurrency {}",
              cfg.domains.size(), cfg.concurrency);
  }

  // Clears the health inputs of running actors (at start and once stopped).
  void clear_health() {
    for (auto& h : health)
      h->clear_running();
  }

  // Sets how long a poller may go without reading (off in tick mode, where
  // it reads only what is due at the start).
  void set_poller_stale_limit(bool tick) {
    auto limit = std::max<int64_t>(health_limits::poller_stale_intervals
                                     * cfg.poll_interval.count(),
                                   health_limits::min_poller_stale_ms);
    for (auto& h : health)
      h->poller_stale_after_ms.store(tick ? 0 : limit);
  }

  // What the HTTP endpoint shows.
  status_source status_source_of() {
    status_source src;
    src.dsn = cfg.dsn;
    src.domain_dsn = cfg.domain_dsn;
    src.process_domains = processes->domains();
    for (auto& m : metrics)
      src.metrics.push_back(m);
    src.snapshot = [this] { return snapshot(); };
    return src;
  }

  bool ready() const {
    if (!running || cancelled->load() || admin_drain.load() != 0)
      return false;
    for (auto& h : health)
      if (!h->polling())
        return false;
    return true;
  }

  const char* readiness() const {
    if (ready())
      return "ready";
    if (!running)
      return "stopped";
    if (admin_drain.load() == 2)
      return "drained";
    return cancelled->load() || admin_drain.load() != 0 ? "draining"
                                                         : "starting";
  }

  status_snapshot snapshot() const {
    status_snapshot s;
    s.version = version();
    s.ready = ready();
    s.readiness = readiness();
    if (running)
      s.uptime_seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - started_at)
                           .count();
    std::vector<domain_health> hs;
    for (size_t i = 0; i < cfg.domains.size(); ++i) {
      auto& m = *metrics[i];
      domain_status d;
      d.health = evaluate_and_log(cfg.domains[i], *health[i]);
      hs.push_back(d.health);
      d.polling = health[i]->polling();
      d.received = m.received.load();
      d.in_flight = m.in_flight.load();
      d.slots = m.slots();
      d.handler_restarts = m.handler_restarts.load();
      d.remote_slots = m.remote_slots.load();
      d.remote_pools = m.remote_pools.load();
      d.remote_disconnects = m.remote_disconnects.load();
      for (size_t a = 0; a < all_db_actors.size(); ++a)
        d.db_errors[a] = m.db_errors(all_db_actors[a]);
      m.for_each_type([&d](const std::string& name, const type_metrics& t) {
        d.types.push_back({name, t.completed.load(), t.failed.load(),
                           t.retried.load(), t.moved_to_tsq.load(),
                           t.duration.read()});
      });
      s.domains.push_back(std::move(d));
    }
    s.state = combine(std::move(hs)).state;
    return s;
  }

  // Stops the HTTP endpoint and the admin actor (once the actors ended).
  void stop_http() {
    std::unique_ptr<http_endpoint> mine;
    std::unique_ptr<admin::server> mine_admin;
    {
      std::lock_guard<std::mutex> guard{mtx};
      mine = std::move(http);
      mine_admin = std::move(admin_port);
    }
  }

  // What the admin actor shows and does.
  admin::source admin_source() {
    admin::source src;
    src.kind = "worker";
    src.name = [] { return actors::worker_identity(); };
    src.read = [this] { return admin_view(); };
    src.drain = [this] { begin_admin_drain(); };
    return src;
  }

  admin::view admin_view() const {
    admin::view v;
    v.readiness = readiness();
    std::vector<domain_health> hs;
    for (size_t i = 0; i < cfg.domains.size(); ++i) {
      auto& m = *metrics[i];
      admin::domain_view d;
      d.domain = cfg.domains[i];
      auto h = evaluate_and_log(cfg.domains[i], *health[i]);
      d.health = lowercase(to_string(h.state));
      hs.push_back(std::move(h));
      d.local_slots = m.slots();
      d.remote_slots = m.remote_slots.load();
      d.in_flight = m.in_flight.load();
      d.finished = 0;
      m.for_each_type([&d](const std::string&, const type_metrics& t) {
        d.finished += t.completed.load() + t.failed.load() + t.retried.load()
                      + t.moved_to_tsq.load();
      });
      d.remote_pools_connected = m.remote_pools.load();
      d.remote_pools = cfg.remote.pools;
      v.in_flight += d.in_flight;
      v.finished += d.finished;
      v.domains.push_back(std::move(d));
    }
    v.health = lowercase(to_string(combine(std::move(hs)).state));
    return v;
  }

  // The admin's drain: stops intake (the pollers) and lets running
  // commands finish, on a thread of its own (the admin actor answers at
  // once); the worker stays up, not ready, until it is stopped.
  void begin_admin_drain() {
    auto mine = current();
    if (!mine)
      return;
    int none = 0;
    if (!admin_drain.compare_exchange_strong(none, 1))
      return;
    auto self = self_ref.lock();
    if (!self)
      return;
    log::info("worker drain requested: taking no new work");
    std::thread([self, mine]() mutable {
      // The drain stops every poller at once; it is bounded like a stop.
      // Past that bound the pollers stay stopped and the worker is idle
      // once its last running command finished.
      auto idle = mine->drain(self->cfg.shutdown_timeout);
      mine.reset();
      actors::release_thread_logger();
      while (!idle && self->admin_drain.load() == 1 && !self->cancelled->load()
             && self->running.load()) {
        idle = self->counters->in_flight.load() <= 0;
        if (!idle)
          std::this_thread::sleep_for(std::chrono::milliseconds{100});
      }
      int draining = 1;
      if (idle && self->admin_drain.compare_exchange_strong(draining, 2))
        log::info("worker drained: idle, taking no new work; stop it when "
                  "convenient");
    }).detach();
  }

  // Returns the running actors, if any, leaving them in place.
  std::shared_ptr<actors::runtime> current() {
    std::lock_guard<std::mutex> guard{mtx};
    return rt;
  }

  // Takes the running actors for stopping them: `expected` only (another
  // stop may have taken them meanwhile), or whatever runs when null.
  std::shared_ptr<actors::runtime>
  take(const std::shared_ptr<actors::runtime>& expected) {
    std::lock_guard<std::mutex> guard{mtx};
    if (!rt || (expected && rt != expected))
      return nullptr;
    running = false;
    return std::move(rt);
  }

  // The graceful stop of `timeout` (see actors/worker/runtime.hpp).
  void stop_gracefully(std::chrono::milliseconds timeout, const char* what) {
    auto mine = current();
    if (!mine)
      return;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    cancelled->store(true);
    auto drained = mine->drain(timeout);
    if (!drained)
      log::warn("{}: in-flight commands did not finish within {} ms; they "
                "reappear after their visibility timeout",
                what, timeout.count());
    if (!take(mine))
      return; // stop_now() took over meanwhile
    mine->stop(caf::exit_reason::user_shutdown);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    auto grace = std::max(left, std::chrono::milliseconds{stop_now_grace});
    if (!actors::retire(std::move(mine), grace))
      log::warn("{}: some actors did not end within {} ms (a handler still "
                "runs); they end in the background",
                what, grace.count());
    clear_health();
    stop_http();
  }

  void stop_now() {
    auto mine = take(nullptr);
    if (!mine)
      return;
    cancelled->store(true);
    mine->stop(caf::exit_reason::user_shutdown);
    actors::retire(std::move(mine), stop_now_grace);
    clear_health();
    stop_http();
  }
};

worker::worker(config::worker_config cfg, handler_registry registry)
  : impl_(std::make_shared<impl>()) {
  auto problems = config::validate(cfg);
  if (!problems.empty())
    throw std::invalid_argument("invalid worker configuration: "
                                + problems.front());
  impl_->cfg = std::move(cfg);
  std::map<std::string, std::vector<std::string>> types;
  for (auto& [domain, type] : registry.keys())
    types[domain].push_back(type);
  for (auto& d : impl_->cfg.domains) {
    impl_->health.push_back(std::make_shared<domain_health_counters>());
    impl_->metrics.push_back(
      std::make_shared<domain_metrics>(d, impl_->cfg.concurrency, types[d]));
  }
  impl_->registry = std::make_shared<const handler_registry>(
    std::move(registry));
  impl_->self_ref = impl_;
}

worker::worker(config::worker_config cfg, handler_registry registry,
               process_registry processes)
  : worker(std::move(cfg), std::move(registry)) {
  impl_->processes = std::make_shared<const process_registry>(
    std::move(processes));
}

worker::~worker() {
  impl_->stop_now();
}

void worker::start() {
  impl_->launch(false);
}

std::future<void> worker::stop(std::chrono::milliseconds timeout) {
  return std::async(std::launch::async, [self = impl_, timeout] {
    self->stop_gracefully(timeout, "worker stop");
  });
}

void worker::stop_now() {
  impl_->stop_now();
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
  return {c.in_flight.load(), c.received.load(),         c.completed.load(),
          c.retried.load(),   c.moved_to_tsq.load(),     c.failed.load(),
          c.rejected.load(),  c.handler_restarts.load(), c.db_errors.load(),
          c.stale.load()};
}

worker_health worker::health() const {
  std::vector<domain_health> domains;
  for (size_t i = 0; i < impl_->cfg.domains.size(); ++i)
    domains.push_back(
      evaluate_and_log(impl_->cfg.domains[i], *impl_->health[i]));
  return combine(std::move(domains));
}

bool worker::is_ready() const noexcept {
  return impl_->ready();
}

std::vector<std::shared_ptr<const domain_metrics>> worker::metrics() const {
  return {impl_->metrics.begin(), impl_->metrics.end()};
}

int worker::http_port() const noexcept {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  return impl_->http ? impl_->http->port() : 0;
}

void worker::on_batch_complete(batch_callback cb) {
  if (impl_->running)
    throw std::logic_error("register batch callbacks before start()");
  impl_->callbacks.push_back(std::move(cb));
}

worker_stats worker::run_tick(std::chrono::milliseconds timeout) {
  impl_->launch(true);
  impl_->stop_gracefully(timeout, "tick");
  return stats();
}

} // namespace cmdbus
