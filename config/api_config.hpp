#pragma once

// The settings of the command API's listener (docs/api.md), read by
// `cmdbus api` and, opt-in, by `cmdbus worker` (its [api] section). No CAF
// or libpq includes.
//
// `cmdbus api` (--config FILE, else $CMDBUS_API_CONFIG, else none; later
// wins: defaults < file < environment < command line):
//
// | file: [section] key | environment              | option
// |---------------------|--------------------------|-------------------
// | [api] listen        | CMDBUS_API_LISTEN        | --listen
// | [api] tokens-file   | CMDBUS_API_TOKENS_FILE   | --tokens-file
// | [api] threads       | CMDBUS_API_THREADS       | --threads
// | [api] connections   | CMDBUS_API_CONNECTIONS   | --connections
// | [tls] certificate, key, ca-file, ca-path, passphrase
// |                     | CMDBUS_TLS_CERTIFICATE.. | --tls-certificate ..
//
// (load_api, config/settings.hpp, reads them.) A worker's [api] section has the same keys (worker_config.hpp: --api,
// --api-tokens-file, --api-threads, --api-connections) and uses the
// worker's own [tls] set.
//
// TLS of the API: a certificate and its key (and passphrase) serve HTTPS;
// a CA file or directory besides requires every client to present a
// certificate that CA signed (mutual TLS). Without a certificate the API
// speaks plain HTTP. The tokens themselves are never a setting of the file:
// a tokens file (mode 600), or $CMDBUS_API_TOKENS.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/config/common.hpp"
#include "cmdbus/config/network_config.hpp"

namespace cmdbus::config {

/// The command API's listener.
struct api_config {
  /// Where it listens, "ADDR:PORT" (parse_http_address); "" serves no API
  /// (a worker's default).
  std::string listen;
  /// The tokens file (mode 600); "" falls back to $CMDBUS_API_TOKENS.
  std::string tokens_file;
  /// Requests answered at once, waiting GETs included; 1..1024.
  int threads = 16;
  /// Database connections; 1..256.
  int connections = 4;
};

/// Problems of `api` (empty when valid), each naming the setting as
/// `prefix` + key ("listen", or "api-threads" for a worker's).
std::vector<std::string> validate_api(const api_config& api,
                                      std::string_view prefix);

/// `cmdbus api`'s listener by default: loopback, port 8780.
inline api_config default_api() {
  api_config api;
  api.listen = "127.0.0.1:8780";
  return api;
}

/// `cmdbus api`'s configuration.
struct api_program_config {
  api_config api = default_api();
  /// HTTPS when a certificate is given (see above).
  tls_config tls;
};

/// Problems of the API's TLS set (empty when valid): a certificate and a
/// key together, a CA (mutual TLS) only with them, readable files.
std::vector<std::string> validate_api_tls(const tls_config& tls);

/// Everything wrong with `cfg`, one sentence each.
std::vector<std::string> validate(const api_program_config& cfg);

} // namespace cmdbus::config
