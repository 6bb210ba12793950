// A handler node's settings table: each setting's key in the file, its
// environment variable, its option with the help --help shows, and where
// its value goes (see the table in config/node_config.hpp).

#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/settings.hpp"

namespace cmdbus::config::detail {

namespace {

settings_table<node_config> make_node_table() {
  using c = node_config;
  using v = raw_value;
  std::vector<setting<c>> rows{
    {kind::string_list,
     "node",
     "domains",
     "CMDBUS_NODE_DOMAINS",
     form::each,
     {"--domain", "DOMAIN",
      "a domain to serve; repeat for several; replaces the domains of the "
      "file and of the environment"},
     [](c& x, const v& y, bool) { x.domains = as_string_list(y); }},
    {kind::integer,
     "node",
     "concurrency",
     "CMDBUS_NODE_CONCURRENCY",
     form::value,
     {"--concurrency", "N",
      "handlers running at once per domain, 1..4096; each worker is offered "
      "N slots (default 16)"},
     [](c& x, const v& y, bool) { x.concurrency = as_int(y); }},
    {kind::string,
     "node",
     "listen",
     "CMDBUS_NODE_LISTEN",
     form::value,
     {"--listen", "HOST:PORT",
      "where to listen (default 127.0.0.1:7400; \":PORT\" means 127.0.0.1, "
      "port 0 a free one)"},
     [](c& x, const v& y, bool) { x.listen = as_string(y); }},
    {kind::string,
     "node",
     "port-file",
     "CMDBUS_NODE_PORT_FILE",
     form::value,
     {"--port-file", "PATH",
      "write the bound port there once listening (for port 0)"},
     [](c& x, const v& y, bool) { x.port_file = as_string(y); }},
    {kind::string,
     "node",
     "name",
     "CMDBUS_NODE_NAME",
     form::value,
     {"--name", "NAME",
      "the node's name in logs and offers (default HOSTNAME:PORT)"},
     [](c& x, const v& y, bool) { x.name = as_string(y); }},
    {kind::duration_or_seconds,
     "node",
     "heartbeat",
     "CMDBUS_NODE_HEARTBEAT",
     form::value,
     {"--heartbeat", "DURATION",
      "connection heartbeat, e.g. 1s; a peer silent for 3 times this is cut; "
      "workers must use the same (default 1s)"},
     [](c& x, const v& y, bool) {
       x.heartbeat_interval = as_duration(y, true);
     }},
    {kind::duration_or_seconds,
     "node",
     "shutdown-timeout",
     "CMDBUS_NODE_SHUTDOWN_TIMEOUT",
     form::value,
     {"--shutdown-timeout", "DURATION",
      "how long a stop lets running handlers finish (default 30s)"},
     [](c& x, const v& y, bool) { x.shutdown_timeout = as_duration(y, true); }},
    {kind::string,
     "admin",
     "listen",
     "CMDBUS_NODE_ADMIN",
     form::value,
     {"--admin", "HOST:PORT",
      "publish the admin actor for `cmdbus cluster status` there (off; "
      "\":PORT\" means 127.0.0.1; TLS as the node's)"},
     [](c& x, const v& y, bool) { x.admin = as_string(y); }},
  };
  for (auto& row : tls_settings<c>())
    rows.push_back(row);
  rows.push_back(
    {kind::boolean,
     "",
     "",
     nullptr,
     form::set,
     {"--dump-config", "", "print the effective configuration and exit"},
     [](c& x, const v& y, bool lenient) {
       x.dump_config = as_bool(y, lenient);
     }});
  return {std::move(rows),
          {"node", "tls", "admin"},
          {},
          {"--config", "FILE",
           "CAF-INI config file (else $CMDBUS_NODE_CONFIG, else none)"},
          "CMDBUS_NODE_CONFIG",
          node_help,
          nullptr};
}

} // namespace

const settings_table<node_config>& node_table() {
  static const auto table = make_node_table();
  return table;
}

} // namespace cmdbus::config::detail
