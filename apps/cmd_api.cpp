// `cmdbus api`: the command API over HTTP (api/command_api.hpp), until
// SIGINT or SIGTERM.

#include <csignal>
#include <cstdlib>
#include <optional>

#include <pthread.h>

#include "api/command_api.hpp"
#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "cmdbus/config/settings.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::cli {

namespace {

std::vector<config::option> api_command_options() {
  auto options = config::detail::api_options();
  options.push_back(dsn_option);
  options.push_back(dsn_file_option);
  options.push_back(help_option);
  return options;
}

const command_spec api_command{
  R"(usage: cmdbus api [--config FILE] [--listen ADDR:PORT] [--tokens-file PATH]
                  [--threads N] [--connections N] [--dsn DSN]
                  [--tls-certificate FILE --tls-key FILE [--tls-ca-file FILE]]

Serves the command API until SIGINT or SIGTERM: programs in any language
send commands and wait for them over HTTP with a bearer token
(docs/api.md; the OpenAPI description is docs/api.yaml):
  POST /v1/domains/{domain}/commands              send one command
  GET  /v1/domains/{domain}/commands/{id}?wait=D  its status, waiting up to
                                                  D (default 15s, max 30s)
  POST /v1/domains/{domain}/batches               create a batch
  GET  /healthz                                   200 while it serves

Tokens: --tokens-file PATH (a file only its owner may read, mode 600), else
$CMDBUS_API_TOKENS_FILE, else the tokens themselves in $CMDBUS_API_TOKENS.
One token per line (or per ';' in the variable), then the domains it
grants, comma-separated, or '*' for all:
    3f9a0c5e...  payments,orders
Tokens are 16 to 256 characters of A-Z a-z 0-9 -._~+/= and never logged.

TLS: --tls-certificate and --tls-key serve HTTPS (--tls-passphrase for an
encrypted key); --tls-ca-file or --tls-ca-path besides requires every client
to present a certificate signed by that CA (mutual TLS). Without them the
API speaks plain HTTP: keep it on loopback, or put a TLS proxy in front.
)",
  api_command_options(),
  R"(
Settings come from the config file (--config FILE, else $CMDBUS_API_CONFIG:
CAF INI with [api] listen, tokens-file, threads, connections and [tls]
certificate, key, ca-file, ca-path, passphrase), then the environment
(CMDBUS_API_LISTEN, CMDBUS_API_TOKENS_FILE, CMDBUS_API_THREADS,
CMDBUS_API_CONNECTIONS, CMDBUS_TLS_CERTIFICATE, CMDBUS_TLS_KEY,
CMDBUS_TLS_CA_FILE, CMDBUS_TLS_CA_PATH, CMDBUS_TLS_PASSPHRASE), then the
command line; later wins.

Exit codes: 0 stopped by SIGINT or SIGTERM, 1 usage error (also: no tokens,
a malformed tokens file, a partial TLS set or an unreadable TLS file), 4
cannot listen on ADDR:PORT or cannot use the TLS files.
)"};

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr)
    return std::nullopt;
  return std::string{v};
}

} // namespace

int run_api(const std::vector<std::string>& argv) {
  args a{argv, api_command};
  if (a.help())
    return print_help(api_command);
  a.expect_positional(0, "no positional argument");
  auto file = a.option("--config");
  if (!file) {
    auto from_env = env_value("CMDBUS_API_CONFIG");
    if (from_env && !from_env->empty())
      file = from_env;
  }
  config::api_program_config cfg;
  try {
    cfg = config::detail::load_api(file, env_value, [&](std::string_view name) {
      return a.option(std::string{name});
    });
  } catch (const config::config_error& e) {
    throw usage_error{e.what()};
  }
  api::api_settings s;
  try {
    s.listen = config::parse_http_address(cfg.api.listen);
  } catch (const std::invalid_argument& e) {
    throw usage_error{std::string{"--listen: "} + e.what()};
  }
  try {
    s.tokens = api::token_store::load(
      cfg.api.tokens_file, std::getenv,
      "--tokens-file PATH (mode 600), $CMDBUS_API_TOKENS_FILE or "
      "$CMDBUS_API_TOKENS");
  } catch (const std::invalid_argument& e) {
    throw usage_error{e.what()};
  }
  s.threads = static_cast<size_t>(cfg.api.threads);
  s.connections = static_cast<size_t>(cfg.api.connections);
  s.tls = cfg.tls;
  auto pool = pool_options_for(a);
  s.dsn = pool.dsn;
  s.pooler = pool.connection.pooler;
  // Block SIGINT/SIGTERM in every thread; this one waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::optional<api::command_api> server;
  try {
    server.emplace(std::move(s));
  } catch (const std::runtime_error& e) {
    throw exit_with{exit_failed, e.what()};
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  log::info("signal {}: stopping the command API", sig);
  server.reset();
  return exit_ok;
}

} // namespace cmdbus::cli
