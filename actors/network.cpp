#include "cmdbus/actors/network.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>

#include "cmdbus/actors/errors.hpp"

namespace cmdbus::actors {

std::chrono::milliseconds
connection_timeout(std::chrono::milliseconds heartbeat) {
  return 3 * heartbeat;
}

void configure_network(caf::actor_system_config& cfg,
                       const network_settings& settings) {
  if (auto problems = config::validate_tls(settings.tls); !problems.empty()) {
    auto text = std::string{};
    for (auto& problem : problems)
      text += (text.empty() ? "" : "\n") + problem;
    throw config::config_error(text);
  }
  if (settings.heartbeat.count() <= 0)
    throw config::config_error("the heartbeat interval must be above 0");
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.app-identifiers", std::vector<std::string>{"cmdbus"});
  cfg.set("middleman.heartbeat-interval", caf::timespan{settings.heartbeat});
  cfg.set("middleman.connection-timeout",
          caf::timespan{connection_timeout(settings.heartbeat)});
  auto& tls = settings.tls;
  if (tls.enabled()) {
    cfg.load<caf::openssl::manager>();
    cfg.set("openssl.certificate", tls.certificate);
    cfg.set("openssl.key", tls.key);
    if (!tls.ca_file.empty())
      cfg.set("openssl.cafile", tls.ca_file);
    if (!tls.ca_path.empty())
      cfg.set("openssl.capath", tls.ca_path);
    if (!tls.passphrase.empty())
      cfg.set("openssl.passphrase", tls.passphrase);
  }
  remote::add_remote_types(cfg);
  add_error_category(cfg);
}

bool uses_tls(caf::actor_system& sys) {
  return sys.has_openssl_manager();
}

caf::expected<uint16_t> publish(caf::actor_system& sys,
                                const remote::node_door_actor& door,
                                const std::string& listen) {
  auto address = config::parse_http_address(listen);
  auto port = static_cast<uint16_t>(address.port);
  if (uses_tls(sys))
    return caf::openssl::publish(door, port, address.host.c_str(), false);
  return sys.middleman().publish(door, port, address.host.c_str(), false);
}

caf::io::middleman_actor connector(caf::actor_system& sys) {
  if (uses_tls(sys))
    return sys.openssl_manager().actor_handle();
  return sys.middleman().actor_handle();
}

bool is_node_door(caf::actor_system& sys, const std::set<std::string>& ifs) {
  return ifs == sys.message_types<remote::node_door_actor>();
}

} // namespace cmdbus::actors
