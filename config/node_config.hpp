#pragma once

// The configuration of a handler node (actors/node.hpp runs one): the
// domains it serves, its handlers per domain, where it listens, its name,
// heartbeat, TLS set and admin port, and how its program stops; read from a
// CAF-INI file, the environment and the command line like the worker's
// (config/worker_config.hpp). No CAF includes.
//
// Precedence (later wins): defaults < file < environment < command line. The
// file is the one named by --config, else by $CMDBUS_NODE_CONFIG, else none.
//
// | file: [section] key        | environment                  | option
// |----------------------------|------------------------------|-----------------
// | [node] domains             | CMDBUS_NODE_DOMAINS (a,b)    | --domain (many)
// | [node] concurrency         | CMDBUS_NODE_CONCURRENCY      | --concurrency
// | [node] listen              | CMDBUS_NODE_LISTEN           | --listen
// | [node] port-file           | CMDBUS_NODE_PORT_FILE        | --port-file
// | [node] name                | CMDBUS_NODE_NAME             | --name
// | [node] heartbeat           | CMDBUS_NODE_HEARTBEAT        | --heartbeat
// | [node] shutdown-timeout    | CMDBUS_NODE_SHUTDOWN_TIMEOUT |
// --shutdown-timeout | [tls] certificate, key,    | CMDBUS_TLS_CERTIFICATE, ...
// | --tls-certificate, |   ca-file, ca-path,        | |   ... |   passphrase |
// | | [admin] listen             | CMDBUS_NODE_ADMIN            | --admin
//
// Values are written as for the worker; the two durations also take a bare
// integer as seconds (`heartbeat = 2` is 2s).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/config/common.hpp"
#include "cmdbus/config/network_config.hpp"

namespace cmdbus::config {

/// Everything a handler node needs.
struct node_config {
  /// The domains it serves; at least one, each a valid domain name, no
  /// duplicates, each with at least one handler.
  std::vector<std::string> domains;

  /// Handlers that run at once per domain (threads); 1..4096. Each worker
  /// that connects is offered this many slots; a node shared by several
  /// workers queues what exceeds them.
  int concurrency = 16;

  /// Where to listen: "HOST:PORT", "[IPV6]:PORT" or ":PORT" (127.0.0.1);
  /// port 0 picks a free one (see handler_node::port). Loopback unless
  /// configured otherwise.
  std::string listen = "127.0.0.1:7400";

  /// The node's name in logs, offers and the demo's results; "" means
  /// HOSTNAME:PORT.
  std::string name;

  /// How often the connection sends a heartbeat; a peer silent for 3 ×
  /// this is cut. Workers must use the same interval (100 ms .. 1 h).
  std::chrono::milliseconds heartbeat_interval{1000};

  /// Certificates (mutual TLS); empty: cleartext, unauthenticated.
  tls_config tls;

  /// Where to publish the admin actor (`cmdbus cluster status`;
  /// actors/ops/admin.hpp): "HOST:PORT" like `listen`; "" (the default)
  /// publishes none. Same TLS set as the door.
  std::string admin;

  /// How long a handler's extend_visibility waits for the worker's answer.
  std::chrono::milliseconds extend_timeout{30000};

  /// The program's (node_main's): how long a stop lets running handlers
  /// finish; >= 0.
  std::chrono::milliseconds shutdown_timeout{30000};

  /// The program's: where to write the bound port once listening (for
  /// port 0); "" writes none.
  std::string port_file;

  /// Set by --dump-config only: print describe() and exit instead of
  /// running. Not a setting of the file or the environment.
  bool dump_config = false;
};

/// Problems of `cfg` (empty when valid), one sentence each.
std::vector<std::string> validate(const node_config& cfg);

/// Applies a CAF-INI text onto `cfg` ([node], [tls], [admin]); `file_name`
/// is used in messages. Throws config_error.
void apply_ini(node_config& cfg, std::string_view text,
               const std::string& file_name);

/// Applies the CMDBUS_NODE_* and CMDBUS_TLS_* environment variables (except
/// CMDBUS_NODE_CONFIG, which load_node() reads). Throws config_error.
void apply_env(node_config& cfg, const env_lookup& getenv);

/// Applies a node's command-line options onto `cfg` and returns the path
/// given by --config, if any. Throws help_requested for --help / -h (its
/// what() is node_help()), and config_error for unknown options, positional
/// arguments, missing or bad values.
std::optional<std::string> apply_args(node_config& cfg,
                                      const std::vector<std::string>& args);

/// The whole sequence, as load() for a worker: defaults, the file (from
/// --config, else $CMDBUS_NODE_CONFIG, else none), the environment, the
/// command line, then validate(). Throws help_requested, or config_error
/// with every problem, one per line.
node_config load_node(const std::vector<std::string>& args,
                      const env_lookup& getenv);

/// Returns the help text of `cmdbus node`'s settings.
const char* node_help();

/// Renders the effective configuration as a CAF-INI text that apply_ini()
/// accepts (never the TLS passphrase), for logs and --dump-config.
std::string describe(const node_config& cfg);

} // namespace cmdbus::config
