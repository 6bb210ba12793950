#include "cmdbus/actors/worker.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "cmdbus/actors/ops/admin.hpp"
#include "cmdbus/actors/ops/http_endpoint.hpp"
#include "cmdbus/actors/ops/status_snapshot.hpp"
#include "cmdbus/actors/ops/throughput.hpp"
#include "cmdbus/actors/worker/batch_counter.hpp"
#include "cmdbus/actors/worker/job_runner.hpp"
#include "cmdbus/actors/worker/remote_link.hpp"
#include "cmdbus/actors/worker/runtime.hpp"
#include "cmdbus/actors/worker/scheduler.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/retention.hpp"
#include "cmdbus/db/schedules.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/model/version.hpp"
#include "cmdbus/process/process_writer.hpp"
#include "cmdbus/process/router.hpp"

namespace cmdbus {

namespace {

/// How long stop_now() and the destructor wait for the actors to end
/// before leaving the rest to a background thread.
constexpr auto stop_now_grace = std::chrono::seconds{1};

// Adds the counts of `m` to `s`.
void add_to(worker_stats& s, const domain_metrics& m) {
  auto t = m.totals();
  s.in_flight += m.in_flight.load();
  s.received += m.received.load();
  s.completed += t.completed;
  s.retried += t.retried;
  s.moved_to_tsq += t.moved_to_tsq;
  s.failed += t.failed;
  s.rejected += m.rejected.load();
  s.handler_restarts += m.handler_restarts.load();
  s.db_errors += m.all_db_errors();
  s.stale += m.stale.load();
}

} // namespace

namespace {

// The housekeeping runner's state ([retention]): the domains it covers
// (filled by the constructors), its pass and counts. Used only by the run
// in progress (the job runner's thread, or a tick run).
struct retention_state {
  /// The served domains and those with processes only, on the worker's
  /// database.
  std::vector<std::string> domains;
  /// The current pass (made at the first run).
  std::unique_ptr<db::prune_pass> pass;
  /// What the current pass removed so far (committed chunks).
  prune_counts pass_total;
  std::shared_ptr<retention_metrics> metrics
    = std::make_shared<retention_metrics>();
};

// Adds `x`, one committed chunk, to `m`.
void count_chunk(retention_metrics& m, const prune_counts& x) {
  m.commands.fetch_add(x.commands, std::memory_order_relaxed);
  m.command_audits.fetch_add(x.command_audits, std::memory_order_relaxed);
  m.processes.fetch_add(x.processes, std::memory_order_relaxed);
  m.process_audits.fetch_add(x.process_audits, std::memory_order_relaxed);
  m.batches.fetch_add(x.batches, std::memory_order_relaxed);
  m.batch_audits.fetch_add(x.batch_audits, std::memory_order_relaxed);
  m.archived_messages.fetch_add(x.archived_messages,
                                std::memory_order_relaxed);
  m.api_requests.fetch_add(x.api_requests, std::memory_order_relaxed);
  m.partitions_created.fetch_add(x.partitions_created,
                                 std::memory_order_relaxed);
  m.partitions_dropped.fetch_add(x.partitions_dropped,
                                 std::memory_order_relaxed);
  m.chunks.fetch_add(1, std::memory_order_relaxed);
}

// The housekeeping runner as a singleton job (db/jobs.hpp): each run is
// one chunk of the pass (db/retention.hpp) in the job's transaction, under
// its lock; a run that leaves work says so, and the next chunk follows
// after `pause` (on whichever replica takes the lock), so that no
// transaction and no lock is held longer than a chunk. A pass that is done
// waits for the next interval. A chunk whose commit failed leaves its rows
// for the next pass.
job_fn retention_job(std::shared_ptr<retention_state> st, retention_ages ages,
                     int chunk_size) {
  return [st, ages, chunk_size](job_context& ctx) {
    if (!st->pass)
      st->pass = std::make_unique<db::prune_pass>(st->domains, ages,
                                                  chunk_size);
    else if (st->pass->done())
      st->pass->restart();
    auto chunk = st->pass->step(ctx.conn);
    auto finished = st->pass->done();
    ctx.more = !finished;
    ctx.on_commit.push_back([st, chunk, finished] {
      count_chunk(*st->metrics, chunk);
      st->pass_total += chunk;
      if (!finished)
        return;
      st->metrics->passes.fetch_add(1, std::memory_order_relaxed);
      auto& t = st->pass_total;
      log::from("retention")
        .info("retention pass done: removed {} commands ({} audit rows), {} "
              "processes ({} audit rows), {} batches ({} audit rows), {} "
              "archived messages, {} API request fingerprints; partitions: "
              "{} created, {} dropped, {} kept past retention",
              t.commands, t.command_audits, t.processes, t.process_audits,
              t.batches, t.batch_audits, t.archived_messages, t.api_requests,
              t.partitions_created, t.partitions_dropped, t.partitions_kept);
      t = prune_counts{};
    });
  };
}

} // namespace

// Shared with the tasks of stop(), so that a future that outlives the
// worker never touches freed memory.
struct worker::impl {
  config::worker_config cfg;
  std::shared_ptr<const handler_registry> registry;
  std::shared_ptr<const process_registry> processes
    = std::make_shared<const process_registry>();
  std::shared_ptr<std::atomic<bool>> cancelled
    = std::make_shared<std::atomic<bool>>(false);
  std::vector<batch_callback> callbacks;
  /// The singleton jobs (add_job), in registration order.
  std::vector<actors::job_entry> jobs;
  /// The application's tick runners (add_tick_runner).
  std::vector<tick_runner> app_runners;
  /// The housekeeping runner's state when [retention] is on (its job is
  /// the first of `jobs`), else null.
  std::shared_ptr<retention_state> retention;
  std::atomic<bool> running{false};
  /// Per configured domain (same order) its health inputs, kept across
  /// restarts of the worker.
  std::vector<std::shared_ptr<domain_health_counters>> health;
  /// Per configured domain its metrics, kept across restarts: the one
  /// store of the worker's counts (stats() adds them up).
  std::vector<std::shared_ptr<domain_metrics>> metrics;
  /// The metrics of the domains whose processes the worker drives without
  /// serving their commands (their process actors' database errors).
  std::vector<std::shared_ptr<domain_metrics>> process_only_metrics;
  std::chrono::steady_clock::time_point started_at;

  /// Guards `rt`: the one place where the running actors are handed from
  /// start to exactly one stopper.
  std::mutex mtx;
  std::shared_ptr<actors::runtime> rt;
  /// The HTTP endpoint while the worker runs (and drains), when configured.
  std::unique_ptr<http_endpoint> http;
  /// The admin actor while the worker runs (and drains), when configured.
  std::unique_ptr<admin::server> admin_port;
  /// The throughput of the status views (HTTP and admin) while either
  /// runs: commands finished per domain, sampled every second. Guarded by
  /// its own mutex: the views read it while start() holds `mtx`.
  std::shared_ptr<throughput_sampler> throughput;
  mutable std::mutex throughput_mtx;
  /// A drain asked through the admin actor: 0 none, 1 draining, 2 drained
  /// (the worker takes no new work until it is stopped and started again).
  std::atomic<int> admin_drain{0};
  /// This object, for the admin drain's answer (set by the constructor).
  std::weak_ptr<impl> self_ref;

  /// Adds `domain` to what the housekeeping runner prunes when it lives on
  /// the worker's database (the runner's session); a domain on a database
  /// of its own is left to `cmdbus prune`, and the log says so.
  void add_retention_domain(retention_state& st, const std::string& domain) {
    if (config::dsn_for(cfg, domain) != cfg.dsn) {
      log::from("retention")
        .warn("retention: domain {} lives on a database of its own, which "
              "the worker's housekeeping runner does not prune (run `cmdbus "
              "prune --domain {}` against it)",
              domain, domain);
      return;
    }
    st.domains.push_back(domain);
  }

  /// The metrics of `domain` (served, or with processes only).
  std::shared_ptr<domain_metrics> metrics_of(const std::string& domain) const {
    for (auto* all : {&metrics, &process_only_metrics})
      for (auto& m : *all)
        if (m->domain() == domain)
          return m;
    return nullptr;
  }

  actors::domain_settings
  settings_for(const std::string& domain, bool tick,
               std::shared_ptr<const config::worker_config> shared) const {
    actors::domain_settings s;
    s.domain = domain;
    s.cfg = std::move(shared);
    s.tick = tick;
    s.record_batches = !callbacks.empty();
    s.registry = registry;
    s.cancelled = cancelled;
    for (size_t i = 0; i < cfg.domains.size(); ++i)
      if (cfg.domains[i] == domain) {
        s.health = health[i];
        s.metrics = metrics[i];
      }
    // Nothing is in flight before the actors start.
    s.metrics->in_flight.store(0);
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
    s.metrics = metrics_of(domain);
    for (size_t i = 0; i < cfg.domains.size(); ++i)
      if (cfg.domains[i] == domain)
        s.health = health[i];
    // Room for every writer to fill a group while another is written: the
    // replies of many processes share a transaction only when they are
    // read together.
    s.max_in_flight = std::max(
      {16, cfg.concurrency + config::max_prefetch(cfg),
       2 * s.writers
         * static_cast<int>(actors::process_writer_state::max_group)});
    return s;
  }

  /// One commands step of a tick run: the domain, its limits and where its
  /// poller marks that they cut it.
  struct tick_scope {
    std::string domain;
    tick_limits limits;
    std::shared_ptr<std::atomic<bool>> cut;
  };

  void launch(bool tick, const tick_scope* scope = nullptr) {
    std::lock_guard<std::mutex> guard{mtx};
    if (rt)
      throw std::logic_error("worker already started");
    // The endpoint listens first: a port that is taken starts nothing.
    // (Its threads read started_at: set before they run.)
    started_at = std::chrono::steady_clock::now();
    // One sampler for every status view (they show it once start()
    // succeeded).
    std::shared_ptr<throughput_sampler> sampler;
    if ((!cfg.http.empty() || !cfg.admin.empty()) && !tick)
      sampler = std::make_shared<throughput_sampler>(
        [all = metrics] {
          std::vector<int64_t> finished;
          for (auto& m : all)
            finished.push_back(m->finished());
          return finished;
        });
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
      opts.pooler = cfg.pooler;
      for (auto& group : config::group_by_dsn(cfg, cfg.domains)) {
        auto conn = db::connection::open(group.dsn, opts);
        // Behind a transaction pooler the server must bound statements.
        db::check_pooled_statement_timeout(conn, cfg.statement_timeout);
        for (auto& d : group.domains) {
          db::create_queue(conn, db::command_queue(d));
          // The index of the priority order (docs/scheduling.md).
          if (config::scheduling_of(cfg, d).priorities)
            conn.query("SELECT commandbus.cmdbus_create_priority_index($1)",
                       db::command_queue(d));
        }
      }
      for (auto& group : config::group_by_dsn(cfg, processes->domains())) {
        auto conn = db::connection::open(group.dsn, opts);
        for (auto& d : group.domains)
          for (auto& q : processes->reply_queues(d))
            db::create_queue(conn, q);
      }
    }
    cancelled->store(false);
    admin_drain.store(0);
    clear_health();
    set_poller_stale_limit(tick);
    auto shared = std::make_shared<const config::worker_config>(cfg);
    actors::batch_delivery_settings delivery;
    delivery.cfg = shared;
    for (auto& m : metrics)
      delivery.metrics.emplace(m->domain(), m);
    std::vector<actors::domain_settings> domains;
    for (auto& d : cfg.domains) {
      if (scope && d != scope->domain)
        continue;
      domains.push_back(settings_for(d, tick, shared));
      if (scope) {
        auto& s = domains.back();
        s.tick_limit = scope->limits;
        s.shard_index = cfg.tick_shard_index;
        s.shard_count = cfg.tick_shard_count;
        s.tick_cut = scope->cut;
      }
    }
    // A step of one domain runs its process reply routers too; the first
    // domain's step also runs those of the domains with processes only.
    auto routed_here = [&](const std::string& d) {
      if (!scope || d == scope->domain)
        return true;
      return scope->domain == cfg.domains.front()
             && std::find(cfg.domains.begin(), cfg.domains.end(), d)
                  == cfg.domains.end();
    };
    std::vector<actors::process_settings> routers;
    for (auto& d : processes->domains())
      if (routed_here(d))
        for (auto& q : processes->reply_queues(d))
          routers.push_back(process_settings_for(d, q, shared));
    // The scheduler of recurring schedules (not in tick mode, which fires
    // them as one of its runners).
    std::shared_ptr<actors::scheduler_settings> schedules;
    if (cfg.run_schedules && !tick) {
      schedules = std::make_shared<actors::scheduler_settings>();
      for (auto& d : cfg.domains)
        if (config::scheduling_of(cfg, d).schedules)
          schedules->domains.push_back(d);
      for (auto& m : metrics)
        schedules->metrics.emplace(m->domain(), m);
    }
    rt = actors::runtime::start(
      std::move(domains), callbacks, std::move(delivery), std::move(routers),
      schedules,
      schedules ? actors::make_schedule_store(shared) : nullptr);
    // Tick runs take the jobs as a runner of their own (run_tick_runners).
    if (!jobs.empty() && !tick)
      rt->start_jobs(job_settings());
    running = true;
    http = std::move(endpoint);
    admin_port = std::move(admin_server);
    {
      std::lock_guard<std::mutex> tguard{throughput_mtx};
      throughput = std::move(sampler);
    }
    log::info("worker started for {} domain(s), concurrency {}",
              cfg.domains.size(), cfg.concurrency);
    if (cfg.pooler == db::pooler_mode::transaction)
      log::info("behind a transaction pooler: polling every {} ms without "
                "LISTEN, no named statements",
                cfg.poll_interval.count());
  }

  // One step of domain `domain`'s commands runner: processes what is due
  // (within `limits` and the shard), waits for the side effects, stops.
  tick_step commands_step(const std::string& domain, const tick_limits& limits,
                          std::chrono::milliseconds timeout) {
    tick_scope scope{domain, limits,
                     std::make_shared<std::atomic<bool>>(false)};
    auto m = metrics_of(domain);
    auto before = m->received.load() + m->rejected.load();
    launch(true, &scope);
    stop_gracefully(timeout, "tick");
    tick_step step;
    step.items = m->received.load() + m->rejected.load() - before;
    step.more = scope.cut->load();
    return step;
  }

  // One step of the jobs runner: each job of the shard from `*next` on,
  // once under its lock (a job whose run says more work is left, until it
  // says none), within `limits`.
  tick_step jobs_step(const tick_limits& limits, size_t& next) {
    tick_step step;
    db::connection_options opts;
    opts.application_name = "cmdbus-jobs";
    opts.statement_timeout = cfg.statement_timeout;
    opts.pooler = cfg.pooler;
    std::optional<db::connection> conn;
    while (next < jobs.size()) {
      auto& j = jobs[next];
      if (!db::job_in_shard(j.def->name, cfg.tick_shard_index,
                            cfg.tick_shard_count)) {
        ++next;
        continue;
      }
      if ((limits.max_items && step.items >= *limits.max_items)
          || (limits.deadline
              && std::chrono::steady_clock::now() >= *limits.deadline)) {
        step.more = true;
        return step;
      }
      if (!conn || !conn->is_open())
        conn.emplace(db::connection::open(cfg.dsn, opts));
      auto start = std::chrono::steady_clock::now();
      auto res = db::run_job_once(*conn, *j.def);
      actors::record_job_attempt(
        j, res,
        std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start)
          .count(),
        "tick");
      ++step.items;
      // A job that works in chunks runs again while it says more is left
      // (within the limits).
      if (!res.more)
        ++next;
    }
    return step;
  }

  // One step of the schedules runner of domain `d`: fires its due slots,
  // at most the items left and 100 schedules a step, in one transaction on
  // a connection of its own (kept in `conn` between steps). Shards do not
  // split schedules: the run of shard index 0 fires them all (a schedule's
  // slot fires once in any case; see docs/scheduling.md).
  tick_step schedules_step(const std::string& d, const tick_limits& limits,
                           std::optional<db::connection>& conn) {
    tick_step step;
    if (cfg.tick_shard_count > 1 && cfg.tick_shard_index != 0)
      return step;
    int64_t limit = 100;
    if (limits.max_items)
      limit = std::min(limit, *limits.max_items);
    if (limit <= 0
        || (limits.deadline
            && std::chrono::steady_clock::now() >= *limits.deadline)) {
      step.more = true;
      return step;
    }
    if (!conn || !conn->is_open()) {
      db::connection_options opts;
      opts.application_name = "cmdbus-schedules";
      opts.statement_timeout = cfg.statement_timeout;
      opts.pooler = cfg.pooler;
      auto dsn = cfg.domain_dsn.find(d);
      conn.emplace(db::connection::open(
        dsn == cfg.domain_dsn.end() ? cfg.dsn : dsn->second, opts));
    }
    auto fired = schedules::fire_due(*conn, d, static_cast<int>(limit));
    for (auto& [name, why] : fired.broken)
      log::from("schedules/" + d).warn("schedule {}/{} paused: {}", d, name, why);
    step.items = static_cast<int64_t>(fired.slots.size());
    step.more = fired.claimed >= limit;
    return step;
  }

  // The runners that the name `name` of [tick] runners stands for. The
  // built-in kinds, in their default order, are those of builtin_kinds.
  std::vector<tick_runner> runners_named(const std::string& name,
                                         std::chrono::milliseconds timeout) {
    for (auto& kind : builtin_kinds())
      if (name == kind.first)
        return kind.second(timeout);
    for (auto& r : app_runners)
      if (r.name == name)
        return {r};
    throw std::invalid_argument("unknown tick runner '" + name
                                + "' (built in: " + builtin_names()
                                + "; or one the application registers)");
  }

  using runner_factory = std::function<std::vector<tick_runner>(
    std::chrono::milliseconds timeout)>;

  // The built-in runner kinds in their default order: a name of [tick]
  // runners and the runners it stands for (a factory given the tick's drain
  // timeout). A new kind is one entry here, at its place in the order.
  std::vector<std::pair<std::string, runner_factory>> builtin_kinds() {
    return {
      {"commands",
       [this](std::chrono::milliseconds timeout) {
         std::vector<tick_runner> out;
         for (auto& d : cfg.domains)
           out.push_back({"commands:" + d,
                          [this, d, timeout](const tick_limits& limits) {
                            return commands_step(d, limits, timeout);
                          },
                          {}});
         return out;
       }},
      {"schedules",
       [this](std::chrono::milliseconds) {
         std::vector<tick_runner> out;
         for (auto& d : cfg.domains) {
           if (!config::scheduling_of(cfg, d).schedules)
             continue;
           auto conn = std::make_shared<std::optional<db::connection>>();
           out.push_back({"schedules:" + d,
                          [this, d, conn](const tick_limits& limits) {
                            return schedules_step(d, limits, *conn);
                          },
                          {}});
         }
         return out;
       }},
      {"jobs",
       [this](std::chrono::milliseconds) {
         auto next = std::make_shared<size_t>(0);
         return std::vector<tick_runner>{
           {"jobs",
            [this, next](const tick_limits& limits) {
              return jobs_step(limits, *next);
            },
            {}}};
       }},
    };
  }

  std::string builtin_names() {
    std::string out;
    for (auto& kind : builtin_kinds())
      out += (out.empty() ? "" : ", ") + kind.first;
    return out;
  }

  // The job runner's jobs and session (the worker's own database).
  actors::job_runner_settings job_settings() const {
    actors::job_runner_settings s;
    s.jobs = jobs;
    s.session.dsn = cfg.dsn;
    s.session.statement_timeout = cfg.statement_timeout;
    s.session.application_name = "cmdbus-jobs";
    s.session.pooler = cfg.pooler;
    s.session.max_backoff = std::chrono::milliseconds{5000};
    return s;
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
    src.pooler = cfg.pooler;
    src.process_domains = processes->domains();
    src.domains = cfg.domains;
    src.snapshot = [this] { return status(); };
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

  // The throughput per domain (unknown while no status view runs).
  std::vector<std::optional<double>> throughput_rates() const {
    std::shared_ptr<throughput_sampler> sampler;
    {
      std::lock_guard<std::mutex> guard{throughput_mtx};
      sampler = throughput;
    }
    if (!sampler)
      return {};
    return sampler->rates();
  }

  // The status view (without queue figures): what HTTP and admin render.
  status_snapshot status() const {
    status_inputs in;
    in.version = version();
    in.ready = ready();
    in.readiness = readiness();
    if (running)
      in.uptime_seconds = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - started_at)
                            .count();
    auto rates = throughput_rates();
    for (size_t i = 0; i < cfg.domains.size(); ++i) {
      domain_source d;
      d.metrics = metrics[i].get();
      d.health = evaluate_and_log(cfg.domains[i], *health[i]);
      d.polling = health[i]->polling();
      if (i < rates.size())
        d.finished_per_second = rates[i];
      d.configured_pools = cfg.remote.pools;
      in.domains.push_back(std::move(d));
    }
    for (auto& j : jobs)
      in.jobs.push_back(j.metrics.get());
    if (retention)
      in.retention = retention->metrics.get();
    return build_status(in);
  }

  // Stops the HTTP endpoint, the admin actor and their sampler (once the
  // actors ended).
  void stop_http() {
    std::unique_ptr<http_endpoint> mine;
    std::unique_ptr<admin::server> mine_admin;
    std::shared_ptr<throughput_sampler> mine_sampler;
    {
      std::lock_guard<std::mutex> guard{mtx};
      mine = std::move(http);
      mine_admin = std::move(admin_port);
    }
    {
      std::lock_guard<std::mutex> guard{throughput_mtx};
      mine_sampler = std::move(throughput);
    }
    // The views first: they read the sampler.
    mine.reset();
    mine_admin.reset();
  }

  // What the admin actor shows and does.
  admin::source admin_source() {
    admin::source src;
    src.kind = "worker";
    src.name = [] { return actors::worker_identity(); };
    src.read = [this] { return admin::view_of(status()); };
    src.drain = [this] { begin_admin_drain(); };
    return src;
  }

  // The admin's drain: a request to the root, which stops intake (the
  // pollers and process routers) and answers once nothing is held; the
  // admin actor answers at once ("draining"). The answer makes the worker
  // "drained"; it stays up, taking no new work, until it is stopped. A
  // drain slower than the shutdown timeout is logged and keeps going.
  void begin_admin_drain() {
    auto mine = current();
    if (!mine)
      return;
    int none = 0;
    if (!admin_drain.compare_exchange_strong(none, 1))
      return;
    log::info("worker drain requested: taking no new work");
    mine->drain_then(cfg.shutdown_timeout, [weak = self_ref] {
      auto self = weak.lock();
      int draining = 1;
      if (self && self->admin_drain.compare_exchange_strong(draining, 2))
        log::info("worker drained: idle, taking no new work; stop it when "
                  "convenient");
    });
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
  auto& ret = impl_->cfg.retention;
  if (ret.enabled()) {
    auto st = std::make_shared<retention_state>();
    for (auto& d : impl_->cfg.domains)
      impl_->add_retention_domain(*st, d);
    impl_->retention = st;
    impl_->jobs.push_back(
      {std::make_shared<const job_definition>(
         job_definition{db::retention_job_name, ret.interval,
                        retention_job(st, ret.ages, ret.chunk_size),
                        ret.pause}),
       std::make_shared<job_metrics>(db::retention_job_name)});
  }
}

worker::worker(config::worker_config cfg, handler_registry registry,
               process_registry processes)
  : worker(std::move(cfg), std::move(registry)) {
  impl_->processes = std::make_shared<const process_registry>(
    std::move(processes));
  for (auto& d : impl_->processes->domains())
    if (!impl_->metrics_of(d)) {
      impl_->process_only_metrics.push_back(
        std::make_shared<domain_metrics>(d, 0, std::vector<std::string>{}));
      if (impl_->retention)
        impl_->add_retention_domain(*impl_->retention, d);
    }
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
  int64_t n = 0;
  for (auto& m : impl_->metrics)
    n += m->in_flight.load();
  return n > 0 ? static_cast<size_t>(n) : 0;
}

const std::string& worker::domain() const noexcept {
  return impl_->cfg.domains.front();
}

worker_stats worker::stats() const noexcept {
  worker_stats s;
  for (auto* all : {&impl_->metrics, &impl_->process_only_metrics})
    for (auto& m : *all)
      add_to(s, *m);
  return s;
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

void worker::add_job(std::string name, std::chrono::milliseconds interval,
                     job_fn fn) {
  if (impl_->running)
    throw std::logic_error("register jobs before start()");
  if (name.empty())
    throw std::invalid_argument("a job needs a name");
  if (interval < std::chrono::milliseconds{1})
    throw std::invalid_argument("job '" + name
                                + "': the interval must be at least 1 ms");
  if (!fn)
    throw std::invalid_argument("job '" + name + "' has no function");
  for (auto& j : impl_->jobs)
    if (j.def->name == name)
      throw std::invalid_argument("job '" + name + "' is already registered");
  auto metrics = std::make_shared<job_metrics>(name);
  impl_->jobs.push_back({std::make_shared<const job_definition>(job_definition{
                           std::move(name), interval, std::move(fn)}),
                         std::move(metrics)});
}

std::vector<std::shared_ptr<const job_metrics>>
worker::job_metrics_all() const {
  std::vector<std::shared_ptr<const job_metrics>> out;
  for (auto& j : impl_->jobs)
    out.push_back(j.metrics);
  return out;
}

void worker::add_tick_runner(tick_runner runner) {
  if (impl_->running)
    throw std::logic_error("register tick runners before start()");
  if (runner.name.empty())
    throw std::invalid_argument("a tick runner needs a name");
  if (!runner.step)
    throw std::invalid_argument("tick runner '" + runner.name
                                + "' has no step function");
  for (auto& kind : impl_->builtin_kinds())
    if (runner.name == kind.first || runner.name.rfind("commands:", 0) == 0)
      throw std::invalid_argument("tick runner '" + runner.name
                                  + "': the name is a built-in runner's");
  for (auto& r : impl_->app_runners)
    if (r.name == runner.name)
      throw std::invalid_argument("tick runner '" + runner.name
                                  + "' is already registered");
  impl_->app_runners.push_back(std::move(runner));
}

tick_result worker::run_tick_runners(std::chrono::milliseconds timeout) {
  auto& cfg = impl_->cfg;
  std::vector<std::string> order = cfg.tick_runners;
  if (order.empty()) {
    for (auto& kind : impl_->builtin_kinds())
      order.push_back(kind.first);
    for (auto& r : impl_->app_runners)
      order.push_back(r.name);
  }
  std::vector<tick_runner> runners;
  for (auto& name : order)
    for (auto& r : impl_->runners_named(name, timeout))
      runners.push_back(std::move(r));
  tick_budget per_runner;
  if (cfg.tick_runner_max_duration.count() > 0)
    per_runner.max_duration = cfg.tick_runner_max_duration;
  if (cfg.tick_runner_max_items > 0)
    per_runner.max_items = cfg.tick_runner_max_items;
  std::optional<std::chrono::milliseconds> overall;
  if (cfg.tick_max_duration.count() > 0)
    overall = cfg.tick_max_duration;
  tick_result out;
  out.report = cmdbus::run_tick_runners(runners, per_runner, overall);
  out.stats = stats();
  return out;
}

worker_stats worker::run_tick(std::chrono::milliseconds timeout) {
  impl_->launch(true);
  impl_->stop_gracefully(timeout, "tick");
  return stats();
}

} // namespace cmdbus
