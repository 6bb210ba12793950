#include "cmdbus/actors/node/handler_node.hpp"

#include <algorithm>
#include <deque>
#include <future>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "cmdbus/actors/ops/admin.hpp"
#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/worker/handler.hpp"
#include "cmdbus/actors/network.hpp"
#include "cmdbus/actors/worker/runtime.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace {

// -- node handler --------------------------------------------------------------

struct node_handler_state {
  node_settings settings;
  std::string domain;
};

outcome decode_failure(const std::string& what) {
  outcome out;
  out.kind = outcome_kind::permanent;
  out.error_code = "REMOTE_DECODE_ERROR";
  out.error_message = what;
  return out;
}

node_handler_actor::behavior_type
node_handler(node_handler_actor::stateful_pointer<node_handler_state> self,
             node_settings settings, std::string domain) {
  self->state.settings = std::move(settings);
  self->state.domain = std::move(domain);
  return {
    [self](atom::handle, remote::wire_command& wc,
           caf::actor& lease) -> remote::wire_outcome {
      auto& st = self->state;
      auto started = std::chrono::steady_clock::now();
      std::shared_ptr<const received_command> rc;
      try {
        if (wc.domain != st.domain)
          throw decode_error("a command of domain '" + wc.domain
                             + "' reached the handlers of domain '" + st.domain
                             + "'");
        rc = std::make_shared<const received_command>(remote::from_wire(wc));
      } catch (const std::exception& e) {
        return remote::to_wire(decode_failure(e.what()));
      }
      auto live = std::make_shared<std::atomic<bool>>(true);
      handler_context ctx{rc,
                          make_extender(&self->system(),
                                        caf::actor_cast<remote::lease_actor>(
                                          lease),
                                        rc->msg_id, handler_mode::blocking,
                                        st.settings.extend_timeout, live),
                          st.settings.cancelled};
      auto out = st.settings.registry->run(*rc, ctx);
      live->store(false);
      return remote::to_wire(out, std::chrono::steady_clock::now() - started);
    },
  };
}

// -- node pool -----------------------------------------------------------------

struct pending_command {
  remote::wire_command cmd;
  caf::actor lease;
  caf::typed_response_promise<remote::wire_outcome> promise;
};

struct node_pool_state {
  node_settings settings;
  std::string domain;
  std::vector<node_handler_actor> idle;
  std::deque<pending_command> queue;
  int64_t running = 0;
  bool draining = false;
  std::vector<caf::typed_response_promise<atom::done>> drained;
};

void finish_drain(node_pool_actor::stateful_pointer<node_pool_state> self) {
  auto& st = self->state;
  if (!st.draining || st.running > 0 || !st.queue.empty())
    return;
  for (auto& rp : st.drained)
    rp.deliver(atom::done::value);
  st.drained.clear();
}

void dispatch(node_pool_actor::stateful_pointer<node_pool_state> self) {
  auto& st = self->state;
  while (!st.idle.empty() && !st.queue.empty()) {
    auto h = st.idle.back();
    st.idle.pop_back();
    auto job = std::move(st.queue.front());
    st.queue.pop_front();
    st.settings.counters->queued -= 1;
    st.settings.counters->busy += 1;
    st.running += 1;
    auto rp = job.promise;
    auto release = [self, h] {
      auto& st = self->state;
      st.idle.push_back(h);
      st.running -= 1;
      st.settings.counters->busy -= 1;
      st.settings.counters->completed += 1;
      dispatch(self);
      finish_drain(self);
    };
    self
      ->request(h, caf::infinite, atom::handle::value, std::move(job.cmd),
                std::move(job.lease))
      .then(
        [rp, release](remote::wire_outcome& out) mutable {
          rp.deliver(std::move(out));
          release();
        },
        [self, rp, release](caf::error& err) mutable {
          // The handler thread died (it never should: run() catches every
          // exception): the command runs again.
          outcome out;
          out.kind = outcome_kind::transient;
          out.error_code = "HANDLER_NODE_FAILED";
          out.error_message = "the handler on node '"
                              + self->state.settings.name->get()
                              + "' failed: " + describe(err);
          rp.deliver(remote::to_wire(out));
          release();
        });
  }
}

node_pool_actor::behavior_type
node_pool(node_pool_actor::stateful_pointer<node_pool_state> self,
          node_settings settings, std::string domain) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.domain = std::move(domain);
  for (int i = 0; i < st.settings.concurrency; ++i)
    st.idle.push_back(self->spawn<caf::detached + caf::linked>(
      node_handler, st.settings, st.domain));
  return {
    [self](atom::handle, remote::wire_command& cmd,
           caf::actor& lease) -> caf::result<remote::wire_outcome> {
      auto& st = self->state;
      if (st.draining)
        return caf::make_error(ec::remote_unavailable,
                               "handler node '" + st.settings.name->get()
                                 + "' is stopping");
      auto rp = self->make_response_promise<remote::wire_outcome>();
      st.queue.push_back({std::move(cmd), std::move(lease), rp});
      st.settings.counters->queued += 1;
      dispatch(self);
      return rp;
    },
    [self](atom::drain) -> caf::result<atom::done> {
      auto& st = self->state;
      st.draining = true;
      auto rp = self->make_response_promise<atom::done>();
      st.drained.push_back(rp);
      finish_drain(self);
      return rp;
    },
  };
}

// -- session -------------------------------------------------------------------

struct session_state {
  node_settings settings;
  node_pool_actor pool;
  caf::actor lease;
  std::string worker;
  std::string domain;

  ~session_state() {
    if (settings.counters)
      settings.counters->sessions -= 1;
  }
};

remote::handler_pool_actor::behavior_type
session(remote::handler_pool_actor::stateful_pointer<session_state> self,
        node_settings settings, node_pool_actor pool, caf::actor lease,
        std::string worker, std::string domain) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.pool = std::move(pool);
  st.lease = std::move(lease);
  st.worker = std::move(worker);
  st.domain = std::move(domain);
  st.settings.counters->sessions += 1;
  self->monitor(st.lease);
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    if (msg.source != st.lease.address())
      return;
    log::from("node-session/" + st.domain)
      .info("worker '{}' (domain {}) disconnected: {}", st.worker, st.domain,
            describe(msg.reason));
    self->quit(caf::exit_reason::normal);
  });
  return {
    [self](atom::handle, remote::wire_command& cmd) {
      auto& st = self->state;
      return self->delegate(st.pool, atom::handle::value, std::move(cmd),
                            st.lease);
    },
  };
}

// -- door ----------------------------------------------------------------------

struct door_state {
  node_settings settings;
  std::map<std::string, node_pool_actor> pools;
};

remote::node_door_actor::behavior_type
door(remote::node_door_actor::stateful_pointer<door_state> self,
     node_settings settings, std::map<std::string, node_pool_actor> pools) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.pools = std::move(pools);
  for (auto& [domain, pool] : st.pools)
    self->link_to(pool);
  return {
    [self](atom::hello, int32_t version, std::string& worker,
           std::string& domain,
           caf::actor& lease) -> caf::result<remote::pool_offer, caf::actor> {
      auto& st = self->state;
      auto name = st.settings.name->get();
      auto mine = remote::effective_protocol_version();
      auto lg = log::from("node-door");
      if (version != mine) {
        lg.error("refused worker '{}' (domain {}): it speaks protocol {}, this "
                 "node speaks {}",
                 worker, domain, version, mine);
        return caf::make_error(ec::protocol_mismatch,
                               "handler node '" + name + "' speaks protocol "
                                 + std::to_string(mine) + ", the worker speaks "
                                 + std::to_string(version));
      }
      auto it = st.pools.find(domain);
      if (it == st.pools.end()) {
        std::string served;
        for (auto& kv : st.pools)
          served += (served.empty() ? "" : ", ") + kv.first;
        lg.warn("refused worker '{}': this node does not serve domain '{}' "
                "(it serves {})",
                worker, domain, served);
        return caf::make_error(ec::unknown_domain,
                               "handler node '" + name
                                 + "' does not serve domain '" + domain
                                 + "' (it serves " + served + ")");
      }
      if (!lease)
        return caf::make_error(ec::remote_unavailable,
                               "hello without a lease actor");
      auto s = self->spawn<caf::linked>(session, st.settings, it->second,
                                        lease, worker, domain);
      remote::pool_offer offer;
      offer.protocol = mine;
      offer.node_name = name;
      offer.command_types = command_types(*st.settings.registry, domain);
      offer.slots = st.settings.concurrency;
      offer.heartbeat_ms = st.settings.heartbeat_ms;
      lg.info("worker '{}' connected for domain {} ({} slots)", worker, domain,
              offer.slots);
      return caf::result<remote::pool_offer, caf::actor>{
        std::move(offer), caf::actor_cast<caf::actor>(s)};
    },
  };
}

} // namespace

std::vector<std::string> command_types(const handler_registry& registry,
                                       const std::string& domain) {
  std::vector<std::string> types;
  for (auto& [d, type] : registry.keys())
    if (d == domain)
      types.push_back(type);
  std::sort(types.begin(), types.end());
  return types;
}

node_pool_actor spawn_node_pool(caf::actor_system& sys,
                                const node_settings& settings,
                                const std::string& domain) {
  return sys.spawn(node_pool, settings, domain);
}

remote::node_door_actor
spawn_node_door(caf::actor_system& sys, const node_settings& settings,
                std::map<std::string, node_pool_actor> pools) {
  return sys.spawn(door, settings, std::move(pools));
}

} // namespace cmdbus::actors

// -- facade --------------------------------------------------------------------

namespace cmdbus {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

} // namespace

std::vector<std::string> validate(const node_config& cfg) {
  std::vector<std::string> problems;
  if (cfg.domains.empty())
    problems.emplace_back("domains: at least one domain is required");
  for (size_t i = 0; i < cfg.domains.size(); ++i) {
    auto& d = cfg.domains[i];
    try {
      db::validate_domain(d);
    } catch (const std::exception& e) {
      problems.push_back("domain '" + d + "': " + e.what());
    }
    if (std::find(cfg.domains.begin(), cfg.domains.begin() + i, d)
        != cfg.domains.begin() + i)
      problems.push_back("domain '" + d + "' is given twice");
  }
  if (cfg.concurrency < 1 || cfg.concurrency > 4096)
    problems.push_back("concurrency (" + std::to_string(cfg.concurrency)
                       + ") must be 1..4096");
  try {
    config::parse_http_address(cfg.listen);
  } catch (const std::invalid_argument& e) {
    problems.push_back("listen (" + cfg.listen + "): " + e.what());
  }
  if (!cfg.admin.empty()) {
    try {
      config::parse_http_address(cfg.admin);
    } catch (const std::invalid_argument& e) {
      problems.push_back("admin (" + cfg.admin + "): " + e.what());
    }
  }
  if (cfg.heartbeat_interval < std::chrono::milliseconds{100}
      || cfg.heartbeat_interval > std::chrono::hours{1})
    problems.push_back("heartbeat (" + std::to_string(cfg.heartbeat_interval.count())
                       + "ms) must be 100ms .. 1h");
  if (cfg.extend_timeout <= std::chrono::milliseconds::zero())
    problems.emplace_back("extend-timeout must be above 0");
  for (auto& p : config::validate_tls(cfg.tls))
    problems.push_back(p);
  return problems;
}

namespace {

// What a node's admin actor shows: its domains with their slots, the
// handlers running and queued, the connected worker sessions; a node
// refuses drain (no drain function).
admin::source admin_source(const handler_node::impl& d);

} // namespace

struct handler_node::impl {
  /// Drops the actor handles and destroys the actor system (its actors
  /// were told to end), waiting a little for it. ~actor_system waits for
  /// every actor, which a handler stuck in application code can delay for
  /// good: never on the caller's thread.
  void retire() {
    door = nullptr;
    pools.clear();
    actors::release_thread_logger();
    auto done = std::make_shared<std::promise<void>>();
    auto gone = done->get_future();
    std::thread([sys = std::move(sys), cfg = std::move(sys_cfg),
                 done]() mutable {
      sys.reset();
      cfg.reset();
      done->set_value();
    }).detach();
    gone.wait_for(std::chrono::seconds{2});
  }

  node_config cfg;
  std::shared_ptr<const handler_registry> registry;
  std::mutex mtx;
  std::unique_ptr<caf::actor_system_config> sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  remote::node_door_actor door;
  std::map<std::string, actors::node_pool_actor> pools;
  actors::node_settings settings;
  /// The admin actor, when configured.
  std::unique_ptr<admin::server> admin_port;
  uint16_t port = 0;
  bool started = false;
  bool stopped = false;
};

namespace {

admin::source admin_source(const handler_node::impl& d) {
  admin::source src;
  src.kind = "node";
  src.name = [name = d.settings.name] { return name->get(); };
  src.read = [counters = d.settings.counters, cancelled = d.settings.cancelled,
              domains = d.cfg.domains, concurrency = d.cfg.concurrency] {
    admin::view v;
    v.readiness = cancelled->load() ? "stopped" : "ready";
    v.in_flight = counters->busy.load() + counters->queued.load();
    v.finished = counters->completed.load();
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

} // namespace

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
  d.sys_cfg = std::make_unique<caf::actor_system_config>();
  d.sys_cfg->set("scheduler.max-threads", 2);
  d.sys_cfg->set("scheduler.policy", caf::atom("sharing"));
  actors::configure_network(*d.sys_cfg, {d.cfg.heartbeat_interval, d.cfg.tls});
  try {
    d.sys = std::make_unique<caf::actor_system>(*d.sys_cfg);
  } catch (const std::exception& e) {
    // CAF's OpenSSL module throws for certificates it cannot use.
    throw std::runtime_error(std::string{"cannot start the network: "}
                             + e.what());
  }
  d.started = true;
  for (auto& domain : d.cfg.domains)
    d.pools.emplace(domain, actors::spawn_node_pool(*d.sys, d.settings, domain));
  d.door = actors::spawn_node_door(*d.sys, d.settings, d.pools);
  auto address = config::parse_http_address(d.cfg.listen);
  auto bound = actors::publish(*d.sys, d.door, d.cfg.listen);
  if (!bound) {
    auto text = actors::describe(bound.error());
    caf::anon_send_exit(d.door, caf::exit_reason::user_shutdown);
    d.stopped = true;
    d.retire();
    throw std::runtime_error("cannot listen on " + d.cfg.listen + ": " + text);
  }
  d.port = *bound;
  d.settings.name->set(d.cfg.name.empty()
                         ? host_name() + ":" + std::to_string(d.port)
                         : d.cfg.name);
  if (!d.cfg.admin.empty()) {
    try {
      d.admin_port = std::make_unique<admin::server>(
        admin_source(d), d.cfg.admin,
        actors::network_settings{d.cfg.heartbeat_interval, d.cfg.tls});
    } catch (const std::exception&) {
      caf::anon_send(actors::connector(*d.sys), caf::close_atom::value, d.port);
      caf::anon_send_exit(d.door, caf::exit_reason::user_shutdown);
      actors::release_thread_logger();
      throw;
    }
  }
  std::string domains;
  for (auto& domain : d.cfg.domains)
    domains += (domains.empty() ? "" : ", ") + domain;
  auto tls = d.cfg.tls.enabled();
  log::info("handler node '{}' listening on {}:{} (domains {}; {} handlers "
            "each; protocol {}; TLS {})",
            d.settings.name->get(), address.host, d.port, domains,
            d.cfg.concurrency, remote::effective_protocol_version(),
            config::describe_tls(d.cfg.tls));
  if (!tls && !is_loopback(address.host))
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
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // No new workers; handlers are told to finish early.
  caf::anon_send(actors::connector(*d.sys), caf::close_atom::value, d.port);
  d.settings.cancelled->store(true);
  {
    caf::scoped_actor self{*d.sys};
    for (auto& [domain, pool] : d.pools) {
      auto left = std::max(std::chrono::milliseconds{1},
                           std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now()));
      self->request(pool, left, atom::drain::value)
        .receive([](atom::done) {},
                 [&](caf::error&) {
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
