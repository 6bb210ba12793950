#pragma once

// The command API (`cmdbus api`, docs/api.md, docs/api.yaml): commands
// sent and awaited over HTTP by programs in any language.
//   GET  /healthz                                   the listener is up
//   POST /v1/domains/{domain}/commands              send one command
//   GET  /v1/domains/{domain}/commands/{id}?wait=D  its status, waiting up
//                                                   to D for a final one
//   POST /v1/domains/{domain}/batches               create a batch
// Served by an http_server (actors/ops/http_server.hpp: the same front and
// limits as the worker's endpoint) with bearer-token authentication
// (api/tokens.hpp) and bodies read strictly (api/request.hpp) before
// anything reaches the database. /healthz is answered on a thread of its
// own: waiting requests never hold it up. With a certificate it serves
// HTTPS (the listener's TLS, http_tls.hpp), with a CA besides it requires
// client certificates; the tokens are checked in either case.

#include <memory>
#include <string>

#include "api/tokens.hpp"
#include "cmdbus/actors/ops/http_server.hpp"
#include "cmdbus/config/common.hpp"
#include "cmdbus/config/network_config.hpp"
#include "cmdbus/db/pooler.hpp"

namespace cmdbus::api {

/// How a command API is set up.
struct api_settings {
  /// Where it listens (default loopback).
  config::http_address listen{"127.0.0.1", 8780};
  /// The database ("" uses the libpq environment).
  std::string dsn;
  db::pooler_mode pooler = db::pooler_mode::none;
  token_store tokens;
  /// Database connections (a waiting GET holds one only while it reads).
  size_t connections = 4;
  /// Threads answering requests: the most requests served at once, GETs
  /// waiting for a command included (each holds a thread, not a
  /// connection, while it waits).
  size_t threads = 16;
  /// HTTPS with this certificate and key (passphrase); with ca_file or
  /// ca_path clients must present a certificate that CA signed. Empty:
  /// plain HTTP.
  config::tls_config tls;
};

/// What the API has done (for tests and the log).
struct api_stats {
  http_server_stats listener;
  /// Answers with a status its operation does not declare (a defect:
  /// docs/api.yaml would be wrong). Always 0 in a correct build.
  uint64_t undeclared = 0;
  /// Answers 503 because the database was unavailable.
  uint64_t unavailable = 0;
};

class command_api {
public:
  /// Listens and serves in the background. Throws std::runtime_error when
  /// it cannot listen, or cannot use the TLS files. The database is not touched before a request.
  explicit command_api(api_settings settings);
  /// Stops serving (answers being written finish first).
  ~command_api();
  command_api(const command_api&) = delete;
  command_api& operator=(const command_api&) = delete;

  /// The port it listens on (the one the system picked for port 0).
  int port() const noexcept;

  api_stats stats() const;

  /// The listener's limits for `threads` answering threads: 256
  /// connections, 5 s to send a request, bodies up to max_body_bytes,
  /// 4 x threads requests waiting, JSON errors, /healthz reserved.
  static http_limits limits(size_t threads);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace cmdbus::api
