#include "cmdbus/actors/ops/admin.hpp"

#include <deque>
#include <future>
#include <stdexcept>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/worker/runtime.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/model/version.hpp"

namespace cmdbus::admin {

namespace {

/// How often the admin actor samples the handled counts, and how far back
/// the throughput looks.
constexpr auto sample_every = std::chrono::seconds{1};
constexpr auto throughput_window = std::chrono::seconds{60};

struct sample {
  std::chrono::steady_clock::time_point at;
  int64_t total = 0;
  std::vector<int64_t> domains;
};

struct admin_state {
  std::shared_ptr<const source> src;
  /// Oldest first, spanning at most throughput_window.
  std::deque<sample> samples;
  static inline const char* name = "cmdbus.admin";
};

// The admin actor plus its own sampling tick.
using admin_impl = admin_actor::extend<caf::reacts_to<atom::heartbeat>>;

sample take_sample(const view& v) {
  sample s;
  s.at = std::chrono::steady_clock::now();
  s.total = v.finished;
  for (auto& d : v.domains)
    s.domains.push_back(d.finished);
  return s;
}

void remember(admin_state& st, sample s) {
  st.samples.push_back(std::move(s));
  while (st.samples.size() > 2
         && st.samples.back().at - st.samples.front().at > throughput_window)
    st.samples.pop_front();
}

std::string answer_status(admin_state& st) {
  auto v = st.src->read();
  auto now = take_sample(v);
  std::vector<double> per_domain(v.domains.size(), -1);
  double total = 0;
  bool known = false;
  if (!st.samples.empty()) {
    auto& first = st.samples.front();
    auto seconds = std::chrono::duration<double>(now.at - first.at).count();
    if (seconds > 0.5) {
      known = true;
      total = static_cast<double>(now.total - first.total) / seconds;
      for (size_t i = 0; i < v.domains.size() && i < first.domains.size();
           ++i)
        if (now.domains[i] >= 0 && first.domains[i] >= 0)
          per_domain[i]
            = static_cast<double>(now.domains[i] - first.domains[i]) / seconds;
    }
  }
  return status_json(*st.src, v, per_domain, total, known);
}

caf::error version_refusal(int32_t version) {
  return caf::make_error(
    actors::ec::protocol_mismatch,
    "the admin actor speaks admin protocol " + std::to_string(protocol_version)
      + ", the request " + std::to_string(version));
}

admin_impl::behavior_type
admin_behavior(admin_impl::stateful_pointer<admin_state> self,
               std::shared_ptr<const source> src) {
  self->state.src = std::move(src);
  remember(self->state, take_sample(self->state.src->read()));
  self->delayed_send(self, sample_every, atom::heartbeat::value);
  return {
    [self](atom::status, int32_t version) -> caf::result<std::string> {
      if (version != protocol_version)
        return version_refusal(version);
      return answer_status(self->state);
    },
    [self](atom::drain, int32_t version) -> caf::result<std::string> {
      auto& st = self->state;
      if (version != protocol_version)
        return version_refusal(version);
      if (!st.src->drain)
        return caf::make_error(actors::ec::unsupported,
                               "a handler node takes no work of its own: "
                               "drain the workers that use it");
      log::from("admin").info("drain requested through the admin port");
      st.src->drain();
      return answer_status(st);
    },
    [self](atom::heartbeat) {
      remember(self->state, take_sample(self->state.src->read()));
      self->delayed_send(self, sample_every, atom::heartbeat::value);
    },
  };
}

using json_writer = rapidjson::Writer<rapidjson::StringBuffer>;

void write_string(json_writer& w, const std::string& s) {
  w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
}

void write_rate(json_writer& w, bool known, double rate) {
  if (known && rate >= 0)
    w.Double(rate);
  else
    w.Null();
}

std::string text_of(const caf::error& err) {
  return actors::describe(err);
}

// Starts an actor system of its own (one scheduler thread) with the
// network `net`, keeping its configuration in `cfg`; `what` prefixes the
// error when CAF refuses to start (certificates it cannot use).
std::unique_ptr<caf::actor_system>
start_system(std::unique_ptr<caf::actor_system_config>& cfg,
             const actors::network_settings& net, const std::string& what) {
  cfg = std::make_unique<caf::actor_system_config>();
  cfg->set("scheduler.max-threads", 1);
  cfg->set("scheduler.policy", caf::atom("sharing"));
  actors::configure_network(*cfg, net);
  try {
    return std::make_unique<caf::actor_system>(*cfg);
  } catch (const std::exception& e) {
    throw std::runtime_error(what + "cannot start the network: " + e.what());
  }
}

} // namespace

std::string status_json(const source& src, const view& v,
                        const std::vector<double>& domain_throughput,
                        double total_throughput, bool throughput_known) {
  rapidjson::StringBuffer buf;
  json_writer w{buf};
  w.StartObject();
  w.Key("protocol");
  w.Int(protocol_version);
  w.Key("name");
  write_string(w, src.name ? src.name() : std::string{});
  w.Key("kind");
  write_string(w, src.kind);
  w.Key("version");
  write_string(w, version());
  w.Key("readiness");
  write_string(w, v.readiness);
  w.Key("health");
  if (v.health.empty())
    w.Null();
  else
    write_string(w, v.health);
  int64_t local = 0;
  int64_t remote = 0;
  for (auto& d : v.domains) {
    local += d.local_slots;
    remote += d.remote_slots;
  }
  w.Key("slots");
  w.StartObject();
  w.Key("local");
  w.Int64(local);
  w.Key("remote");
  w.Int64(remote);
  w.EndObject();
  w.Key("in_flight");
  w.Int64(v.in_flight);
  w.Key("throughput_1m");
  write_rate(w, throughput_known, total_throughput);
  if (v.sessions >= 0) {
    w.Key("sessions");
    w.Int64(v.sessions);
  }
  w.Key("domains");
  w.StartArray();
  for (size_t i = 0; i < v.domains.size(); ++i) {
    auto& d = v.domains[i];
    w.StartObject();
    w.Key("domain");
    write_string(w, d.domain);
    w.Key("health");
    if (d.health.empty())
      w.Null();
    else
      write_string(w, d.health);
    w.Key("slots");
    w.StartObject();
    w.Key("local");
    w.Int64(d.local_slots);
    w.Key("remote");
    w.Int64(d.remote_slots);
    w.EndObject();
    w.Key("in_flight");
    w.Int64(d.in_flight);
    w.Key("throughput_1m");
    write_rate(w, throughput_known && i < domain_throughput.size(),
               i < domain_throughput.size() ? domain_throughput[i] : -1);
    w.Key("remote_pools");
    w.StartObject();
    w.Key("connected");
    w.Int64(d.remote_pools_connected);
    w.Key("configured");
    w.StartArray();
    for (auto& p : d.remote_pools)
      write_string(w, p);
    w.EndArray();
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return {buf.GetString(), buf.GetSize()};
}

// -- server ------------------------------------------------------------------

struct server::impl {
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  admin_actor actor;
  uint16_t port = 0;
};

server::server(source src, const std::string& listen,
               const actors::network_settings& net)
  : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.sys = start_system(d.cfg, net, "admin: ");
  auto shared = std::make_shared<const source>(std::move(src));
  d.actor = caf::actor_cast<admin_actor>(d.sys->spawn(admin_behavior, shared));
  auto bound = actors::publish(*d.sys, d.actor, listen);
  if (!bound) {
    auto text = actors::describe(bound.error());
    caf::anon_send_exit(d.actor, caf::exit_reason::user_shutdown);
    d.actor = nullptr;
    actors::release_thread_logger();
    throw std::runtime_error("admin: cannot listen on " + listen + ": "
                             + text);
  }
  d.port = *bound;
  auto address = config::parse_http_address(listen);
  log::info("admin actor listening on {}:{} (TLS {})", address.host, d.port,
            config::describe_tls(net.tls));
  if (!net.tls.enabled() && address.host != "127.0.0.1"
      && address.host != "::1" && address.host != "localhost")
    log::warn("the admin port listens on {} without TLS: anyone who reaches "
              "it can read the status and drain this process",
              address.host);
  actors::release_thread_logger();
}

server::~server() {
  auto& d = *impl_;
  if (d.sys) {
    if (d.port != 0)
      caf::anon_send(actors::connector(*d.sys), caf::close_atom::value, d.port);
    if (d.actor)
      caf::anon_send_exit(d.actor, caf::exit_reason::user_shutdown);
    d.actor = nullptr;
    actors::release_thread_logger();
    d.sys.reset();
  }
}

uint16_t server::port() const noexcept {
  return impl_->port;
}

// -- client ------------------------------------------------------------------

struct client::impl {
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
};

client::client(const actors::network_settings& net)
  : impl_(std::make_unique<impl>()) {
  impl_->sys = start_system(impl_->cfg, net, "");
}

client::~client() {
  actors::release_thread_logger();
}

std::vector<answer> client::ask(const std::vector<std::string>& addresses,
                                bool drain,
                                std::chrono::milliseconds timeout) {
  auto& sys = *impl_->sys;
  auto one = [&sys, drain, timeout](std::string address) {
    answer a;
    a.address = address;
    config::http_address where;
    try {
      where = config::parse_node_address(address);
    } catch (const std::invalid_argument& e) {
      a.error = e.what();
      return a;
    }
    {
      caf::scoped_actor self{sys};
      admin_actor target;
      self
        ->request(actors::connector(sys), timeout, caf::connect_atom::value,
                  where.host, static_cast<uint16_t>(where.port))
        .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
              const std::set<std::string>& ifs) {
            if (!ptr)
              a.error = "nothing is published on that port";
            else if (ifs != sys.message_types<admin_actor>())
              a.error = "not a cmdbus admin port (its interface differs)";
            else
              target = caf::actor_cast<admin_actor>(ptr);
          },
          [&](caf::error& err) { a.error = text_of(err); });
      if (target) {
        auto on_json = [&](std::string& json) {
          a.reached = true;
          a.json = std::move(json);
        };
        auto on_error = [&](caf::error& err) {
          a.error = text_of(err);
          a.unsupported = err.category() == actors::ec_category
                          && err.code()
                               == static_cast<uint8_t>(actors::ec::unsupported);
        };
        if (drain)
          self->request(target, timeout, atom::drain::value, protocol_version)
            .receive(on_json, on_error);
        else
          self->request(target, timeout, atom::status::value, protocol_version)
            .receive(on_json, on_error);
      }
    }
    actors::release_thread_logger();
    return a;
  };
  std::vector<std::future<answer>> pending;
  for (auto& address : addresses)
    pending.push_back(std::async(std::launch::async, one, address));
  std::vector<answer> out;
  for (auto& f : pending)
    out.push_back(f.get());
  return out;
}

} // namespace cmdbus::admin
