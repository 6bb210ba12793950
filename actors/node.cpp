// The handler node facade (actors/node.hpp): starts the node's actors
// (actors/node/) in an actor system of its own, publishes the door, and
// stops them.

#include "cmdbus/actors/node.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/network.hpp"
#include "cmdbus/actors/node/door.hpp"
#include "cmdbus/actors/node/pool.hpp"
#include "cmdbus/actors/ops/admin.hpp"
#include "cmdbus/actors/ops/throughput.hpp"
#include "cmdbus/actors/system_host.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus {

namespace actors {

std::vector<std::string> command_types(const handler_registry& registry,
                                       const std::string& domain) {
  std::vector<std::string> types;
  for (auto& [d, type] : registry.keys())
    if (d == domain)
      types.push_back(type);
  std::sort(types.begin(), types.end());
  return types;
}

} // namespace actors

struct handler_node::impl {
  node_config cfg;
  std::shared_ptr<const handler_registry> registry;
  std::mutex mtx;
  std::shared_ptr<actors::system_host> host;
  remote::node_door_actor door;
  std::map<std::string, actors::node_pool_actor> pools;
  actors::node_settings settings;
  /// The admin actor, when configured, and the throughput it shows.
  std::unique_ptr<admin::server> admin_port;
  std::shared_ptr<throughput_sampler> throughput;
  uint16_t port = 0;
  bool started = false;
  bool stopped = false;

  /// Drops the actor handles and the actor system (its actors were told to
  /// end), waiting a little for it to be gone.
  void retire() {
    door = nullptr;
    pools.clear();
    actors::retire(std::move(host), std::chrono::seconds{2});
  }

  /// What the node's admin actor shows: its domains with their slots, the
  /// handlers running and queued, the connected worker sessions, and the
  /// commands its handlers ran per second over the last minute (over all
  /// domains); a node refuses drain (no drain function).
  admin::source admin_source() const {
    admin::source src;
    src.kind = "node";
    src.name = [name = settings.name] { return name->get(); };
    src.read = [counters = settings.counters, cancelled = settings.cancelled,
                domains = cfg.domains, concurrency = cfg.concurrency,
                sampler = throughput] {
      admin::view v;
      v.readiness = cancelled->load() ? "stopped" : "ready";
      v.in_flight = counters->busy.load() + counters->queued.load();
      v.finished = counters->completed.load();
      if (auto rates = sampler->rates(); !rates.empty())
        v.throughput_1m = rates.front();
      v.sessions = counters->sessions.load();
      for (auto& domain : domains) {
        admin::domain_view dv;
        dv.domain = domain;
        dv.local_slots = concurrency;
        v.domains.push_back(std::move(dv));
      }
      return v;
    };
    return src;
  }
};

handler_node::handler_node(node_config cfg, handler_registry registry)
  : impl_(std::make_unique<impl>()) {
  impl_->cfg = std::move(cfg);
  impl_->registry
    = std::make_shared<const handler_registry>(std::move(registry));
  impl_->settings.registry = impl_->registry;
  impl_->settings.cancelled = std::make_shared<std::atomic<bool>>(false);
  impl_->settings.counters = std::make_shared<actors::node_counters>();
  impl_->settings.name = std::make_shared<actors::node_name>();
}

handler_node::~handler_node() {
  stop(std::chrono::milliseconds{1000});
}

uint16_t handler_node::start() {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  auto& d = *impl_;
  if (d.started)
    throw std::logic_error("handler_node::start: already started");
  if (auto problems = validate(d.cfg); !problems.empty()) {
    std::string text;
    for (auto& p : problems)
      text += (text.empty() ? "" : "\n") + p;
    throw config::config_error(text);
  }
  for (auto& domain : d.cfg.domains)
    if (actors::command_types(*d.registry, domain).empty())
      throw config::config_error("no handlers for domain '" + domain + "'");
  d.settings.concurrency = d.cfg.concurrency;
  d.settings.heartbeat_ms = d.cfg.heartbeat_interval.count();
  d.settings.extend_timeout = d.cfg.extend_timeout;
  actors::host_settings hs;
  hs.network = actors::network_settings{d.cfg.heartbeat_interval, d.cfg.tls};
  d.host = actors::system_host::start(hs);
  auto& sys = d.host->system();
  d.started = true;
  for (auto& domain : d.cfg.domains)
    d.pools.emplace(domain, sys.spawn(actors::node_pool, d.settings, domain,
                                      actors::spawn_node_handler));
  d.door = sys.spawn(actors::door, d.settings, d.pools);
  auto address = config::parse_http_address(d.cfg.listen);
  auto bound = actors::publish(sys, d.door, d.cfg.listen);
  if (!bound) {
    auto text = actors::describe(bound.error());
    caf::anon_send_exit(d.door, caf::exit_reason::user_shutdown);
    d.stopped = true;
    d.retire();
    throw std::runtime_error("cannot listen on " + d.cfg.listen + ": " + text);
  }
  d.port = *bound;
  d.settings.name->set(d.cfg.name.empty()
                         ? config::host_name() + ":" + std::to_string(d.port)
                         : d.cfg.name);
  if (!d.cfg.admin.empty()) {
    try {
      d.throughput = std::make_shared<throughput_sampler>(
        [counters = d.settings.counters] {
          return std::vector<int64_t>{counters->completed.load()};
        });
      d.admin_port = std::make_unique<admin::server>(
        d.admin_source(), d.cfg.admin,
        actors::network_settings{d.cfg.heartbeat_interval, d.cfg.tls});
    } catch (const std::exception&) {
      d.throughput.reset();
      caf::anon_send(actors::connector(sys), caf::close_atom::value, d.port);
      caf::anon_send_exit(d.door, caf::exit_reason::user_shutdown);
      d.stopped = true;
      d.retire();
      throw;
    }
  }
  std::string domains;
  for (auto& domain : d.cfg.domains)
    domains += (domains.empty() ? "" : ", ") + domain;
  log::info("handler node '{}' listening on {}:{} (domains {}; {} handlers "
            "each; protocol {}; TLS {})",
            d.settings.name->get(), address.host, d.port, domains,
            d.cfg.concurrency, remote::effective_protocol_version(),
            config::describe_tls(d.cfg.tls));
  if (!d.cfg.tls.enabled() && !config::is_loopback(address.host))
    log::warn("handler node listens on {} without TLS: anyone who reaches "
              "this port can run its handlers with any payload, and "
              "commands and results cross the network in clear text",
              address.host);
  actors::release_thread_logger();
  return d.port;
}

void handler_node::stop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> guard{impl_->mtx};
  auto& d = *impl_;
  if (!d.started || d.stopped)
    return;
  d.stopped = true;
  d.admin_port.reset();
  d.throughput.reset();
  auto& sys = d.host->system();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // No new workers; handlers are told to finish early.
  caf::anon_send(actors::connector(sys), caf::close_atom::value, d.port);
  d.settings.cancelled->store(true);
  {
    caf::scoped_actor self{sys};
    for (auto& [domain, pool] : d.pools) {
      auto left = std::max(std::chrono::milliseconds{1},
                           std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now()));
      self->request(pool, left, atom::drain::value)
        .receive([](atom::done) {},
                 [&domain = domain](caf::error&) {
                   log::warn("handler node: handlers of domain {} still "
                             "running at the stop's timeout; their workers "
                             "make their commands visible again",
                             domain);
                 });
    }
    self->send_exit(d.door, caf::exit_reason::user_shutdown);
  }
  d.retire();
  log::info("handler node stopped");
}

uint16_t handler_node::port() const {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  return impl_->port;
}

std::string handler_node::name() const {
  auto n = impl_->settings.name->get();
  return n.empty() ? impl_->cfg.name : n;
}

node_status handler_node::status() const {
  auto& c = *impl_->settings.counters;
  node_status s;
  s.slots = static_cast<int64_t>(impl_->cfg.domains.size())
            * impl_->cfg.concurrency;
  s.busy = c.busy.load();
  s.queued = c.queued.load();
  s.sessions = c.sessions.load();
  s.completed = c.completed.load();
  return s;
}

} // namespace cmdbus
