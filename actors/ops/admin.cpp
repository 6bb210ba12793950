#include "cmdbus/actors/ops/admin.hpp"

#include <future>
#include <stdexcept>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/ops/admin_actor.hpp"
#include "cmdbus/actors/system_host.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::admin {

namespace {

std::string text_of(const caf::error& err) {
  return actors::describe(err);
}

} // namespace

// -- server ------------------------------------------------------------------

namespace {

// The admin port's actor system: one scheduler thread is plenty.
std::shared_ptr<actors::system_host>
start_host(const actors::network_settings& net) {
  actors::host_settings hs;
  hs.threads = 1;
  hs.network = net;
  return actors::system_host::start(hs);
}

// How long a server or client waits for its actor system to end.
constexpr auto retire_grace = std::chrono::seconds{2};

} // namespace

struct server::impl {
  std::shared_ptr<actors::system_host> host;
  admin_actor actor;
  uint16_t port = 0;
};

server::server(source src, const std::string& listen,
               const actors::network_settings& net)
  : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  try {
    d.host = start_host(net);
  } catch (const config::config_error&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string{"admin: "} + e.what());
  }
  auto& sys = d.host->system();
  auto shared = std::make_shared<const source>(std::move(src));
  d.actor = sys.spawn(admin, shared);
  auto bound = actors::publish(sys, d.actor, listen);
  if (!bound) {
    auto text = actors::describe(bound.error());
    caf::anon_send_exit(d.actor, caf::exit_reason::user_shutdown);
    d.actor = nullptr;
    actors::retire(std::move(d.host), retire_grace);
    throw std::runtime_error("admin: cannot listen on " + listen + ": "
                             + text);
  }
  d.port = *bound;
  auto address = config::parse_http_address(listen);
  log::info("admin actor listening on {}:{} (TLS {})", address.host, d.port,
            config::describe_tls(net.tls));
  if (!net.tls.enabled() && !config::is_loopback(address.host))
    log::warn("the admin port listens on {} without TLS: anyone who reaches "
              "it can read the status and drain this process",
              address.host);
  actors::release_thread_logger();
}

server::~server() {
  auto& d = *impl_;
  if (!d.host)
    return;
  if (d.port != 0)
    caf::anon_send(actors::connector(d.host->system()), caf::close_atom::value,
                   d.port);
  if (d.actor)
    caf::anon_send_exit(d.actor, caf::exit_reason::user_shutdown);
  d.actor = nullptr;
  actors::retire(std::move(d.host), retire_grace);
}

uint16_t server::port() const noexcept {
  return impl_->port;
}

// -- client ------------------------------------------------------------------

struct client::impl {
  std::shared_ptr<actors::system_host> host;
};

client::client(const actors::network_settings& net)
  : impl_(std::make_unique<impl>()) {
  impl_->host = start_host(net);
}

client::~client() {
  actors::retire(std::move(impl_->host), retire_grace);
}

std::vector<answer> client::ask(const std::vector<std::string>& addresses,
                                bool drain,
                                std::chrono::milliseconds timeout) {
  auto& sys = impl_->host->system();
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
