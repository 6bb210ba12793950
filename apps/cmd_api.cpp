// `cmdbus api`: the command API over HTTP (api/command_api.hpp), until
// SIGINT or SIGTERM.

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <pthread.h>
#include <sys/stat.h>

#include "api/command_api.hpp"
#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/database.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::cli {

namespace {

const command_spec api_command{
  R"(usage: cmdbus api [--listen ADDR:PORT] [--tokens-file PATH]
                  [--threads N] [--connections N] [--dsn DSN]

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
)",
  {{"--listen", "ADDR:PORT",
    "where to listen (default: $CMDBUS_API_LISTEN, else 127.0.0.1:8780; "
    "port 0 picks a free one, logged at the start)"},
   {"--tokens-file", "PATH", "the tokens (see above)"},
   {"--threads", "N",
    "requests answered at once, GETs that wait included (default 16)"},
   {"--connections", "N", "database connections (default 4)"},
   dsn_option,
   dsn_file_option,
   help_option},
  R"(
Exit codes: 0 stopped by SIGINT or SIGTERM, 1 usage error (also: no tokens,
a malformed tokens file), 4 cannot listen on ADDR:PORT.
)"};

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string{v} : fallback;
}

/// The tokens from --tokens-file, $CMDBUS_API_TOKENS_FILE or
/// $CMDBUS_API_TOKENS; usage_error when none, or when the file may be
/// read by others.
api::token_store load_tokens(const args& a) {
  auto path = a.option("--tokens-file");
  if (!path && std::getenv("CMDBUS_API_TOKENS_FILE") != nullptr)
    path = env_or("CMDBUS_API_TOKENS_FILE", "");
  try {
    if (path && !path->empty()) {
      struct stat st {};
      if (::stat(path->c_str(), &st) != 0)
        throw usage_error{"tokens file " + *path + " cannot be read"};
      if ((st.st_mode & 077) != 0)
        throw usage_error{"tokens file " + *path
                          + " may be read by others: chmod 600 it"};
      std::ifstream in{*path, std::ios::binary};
      std::ostringstream text;
      text << in.rdbuf();
      if (!in)
        throw usage_error{"tokens file " + *path + " cannot be read"};
      return api::token_store::parse(text.str(), "tokens file " + *path);
    }
    if (const char* v = std::getenv("CMDBUS_API_TOKENS"))
      return api::token_store::parse(v, "$CMDBUS_API_TOKENS");
  } catch (const std::invalid_argument& e) {
    throw usage_error{e.what()};
  }
  throw usage_error{"the command API needs tokens: --tokens-file PATH, "
                    "$CMDBUS_API_TOKENS_FILE or $CMDBUS_API_TOKENS"};
}

} // namespace

int run_api(const std::vector<std::string>& argv) {
  args a{argv, api_command};
  if (a.help())
    return print_help(api_command);
  a.expect_positional(0, "no positional argument");
  api::api_settings s;
  try {
    s.listen = config::parse_http_address(
      a.option("--listen")
        .value_or(env_or("CMDBUS_API_LISTEN", "127.0.0.1:8780")));
  } catch (const std::invalid_argument& e) {
    throw usage_error{std::string{"--listen: "} + e.what()};
  }
  s.tokens = load_tokens(a);
  s.threads = static_cast<size_t>(a.int_option("--threads", 1).value_or(16));
  s.connections = static_cast<size_t>(
    a.int_option("--connections", 1).value_or(4));
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
