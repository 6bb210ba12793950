#include "cmdbus/actors/network.hpp"

#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/function_view.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "cmdbus/actors/ops/admin.hpp"
#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/tls_transport.hpp"

namespace cmdbus::actors {

namespace {

// The last OpenSSL error of this thread, as text ("" when none).
std::string openssl_error() {
  auto code = ERR_get_error();
  ERR_clear_error();
  if (code == 0)
    return {};
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  return buf;
}

// Loads the certificate set into a throwaway context, so that a file that
// is not what it should be is refused with its setting's name now, not at
// the first connection (CAF loads them per connection).
void check_certificates(const config::tls_config& tls) {
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx{SSL_CTX_new(TLS_method()),
                                                   SSL_CTX_free};
  if (!ctx)
    throw config::config_error("TLS: cannot create an OpenSSL context: "
                               + openssl_error());
  auto fail = [](const std::string& what) {
    throw config::config_error(what + ": " + openssl_error());
  };
  if (tls.passphrase.empty())
    // Never ask on a terminal for the passphrase of an encrypted key.
    SSL_CTX_set_default_passwd_cb(ctx.get(),
                                  [](char*, int, int, void*) { return 0; });
  else
    SSL_CTX_set_default_passwd_cb_userdata(
      ctx.get(), const_cast<char*>(tls.passphrase.c_str()));
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.certificate.c_str())
      != 1)
    fail("tls-certificate (" + tls.certificate
         + "): not a usable PEM certificate");
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key.c_str(), SSL_FILETYPE_PEM)
      != 1)
    fail("tls-key (" + tls.key
         + "): not a usable PEM private key (or a wrong tls-passphrase)");
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    fail("tls-key (" + tls.key + ") does not belong to tls-certificate ("
         + tls.certificate + ")");
  if (SSL_CTX_load_verify_locations(
        ctx.get(), tls.ca_file.empty() ? nullptr : tls.ca_file.c_str(),
        tls.ca_path.empty() ? nullptr : tls.ca_path.c_str())
      != 1)
    fail("tls-ca-file / tls-ca-path: no usable CA certificates");
}

} // namespace

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
    check_certificates(tls);
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

template <class Handle>
caf::expected<uint16_t> publish(caf::actor_system& sys, const Handle& whom,
                                const std::string& listen) {
  auto address = config::parse_http_address(listen);
  auto port = static_cast<uint16_t>(address.port);
  // SO_REUSEADDR: a node restarted after a crash binds its port again at
  // once, although the connections of its predecessor linger in TIME_WAIT
  // (on Linux it never lets two processes listen on one port).
  // With TLS through our own middleman actor, not caf::openssl::publish:
  // see tls_transport.hpp.
  if (uses_tls(sys)) {
    auto f = caf::make_function_view(tls_middleman(sys));
    return f(caf::publish_atom::value, port,
             caf::actor_cast<caf::strong_actor_ptr>(whom),
             sys.message_types(whom), address.host, true);
  }
  return sys.middleman().publish(whom, port, address.host.c_str(), true);
}

template caf::expected<uint16_t>
publish(caf::actor_system&, const remote::node_door_actor&,
        const std::string&);
template caf::expected<uint16_t>
publish(caf::actor_system&, const admin::admin_actor&, const std::string&);

caf::io::middleman_actor connector(caf::actor_system& sys) {
  if (uses_tls(sys))
    return tls_middleman(sys);
  return sys.middleman().actor_handle();
}

bool is_node_door(caf::actor_system& sys, const std::set<std::string>& ifs) {
  return ifs == sys.message_types<remote::node_door_actor>();
}

} // namespace cmdbus::actors
