// The help texts of `cmdbus worker` and `cmdbus node` (and of the programs
// built on worker_main and node_main): the usage line and the prose are
// written here, the "Options:" block is generated from the settings tables
// (config/worker_settings.cpp, config/node_settings.cpp). --log-level and
// --log-format are options of the programs (cli/program.hpp), listed by
// them with their other options of the command line only.

#include "cmdbus/config/help.hpp"

#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config {

namespace {

constexpr const char* worker_usage = "cmdbus worker";

constexpr const char* worker_intro = R"(usage: cmdbus worker [options]

Runs the command handlers of the configured domains until stopped (SIGINT or
SIGTERM), or drains every domain once with --tick.
)";

constexpr const char* worker_prose = R"(
Durations are an integer with a unit: ms, s, min, h or d (250ms, 30s, 1min,
30d).
Precedence: defaults < config file < environment < command line.

Environment: CMDBUS_CONFIG, CMDBUS_DSN, CMDBUS_DSN_FILE, CMDBUS_POOLER,
  CMDBUS_DOMAINS (a,b), CMDBUS_CONCURRENCY, CMDBUS_PREFETCH,
  CMDBUS_VISIBILITY_TIMEOUT,
  CMDBUS_POLL_INTERVAL, CMDBUS_USE_NOTIFY (true/false/1/0),
  CMDBUS_DEFERRED_CLAIMS (true/false/1/0),
  CMDBUS_STATEMENT_TIMEOUT,
  CMDBUS_SHUTDOWN_TIMEOUT, CMDBUS_FLUSH_INTERVAL, CMDBUS_HTTP,
  CMDBUS_MAX_ATTEMPTS,
  CMDBUS_BACKOFF (10,60,300), CMDBUS_BACKOFF_JITTER,
  CMDBUS_REMOTE_POOLS (h1:7400,h2:7400), CMDBUS_REMOTE_CONNECT_TIMEOUT,
  CMDBUS_REMOTE_RECONNECT_MAX, CMDBUS_REMOTE_HEARTBEAT_INTERVAL,
  CMDBUS_TLS_CERTIFICATE, CMDBUS_TLS_KEY, CMDBUS_TLS_CA_FILE,
  CMDBUS_TLS_CA_PATH, CMDBUS_TLS_PASSPHRASE, CMDBUS_ADMIN,
  CMDBUS_API, CMDBUS_API_TOKENS_FILE (else the tokens in CMDBUS_API_TOKENS),
  CMDBUS_API_THREADS, CMDBUS_API_CONNECTIONS,
  CMDBUS_RETENTION_COMMANDS, CMDBUS_RETENTION_PROCESSES,
  CMDBUS_RETENTION_BATCHES, CMDBUS_RETENTION_ARCHIVE,
  CMDBUS_RETENTION_INTERVAL, CMDBUS_RETENTION_CHUNK_SIZE,
  CMDBUS_RETENTION_PAUSE,
  CMDBUS_DOMAIN_DSN_<domain> (CMDBUS_DOMAIN_DSN_reports: that served
  domain's DSN); the log level: CMDBUS_LOG_LEVEL, else SPDLOG_LEVEL, else
  info.

Config file (CAF INI; ';' starts a comment):
  dsn = "host=db dbname=app"
  [worker]
  domains = ["payments", "reports"]
  concurrency = 16
  prefetch = auto
  visibility-timeout = 30s
  poll-interval = 1s
  use-notify = true
  deferred-claims = true
  statement-timeout = 25s
  shutdown-timeout = 30s
  flush-interval = 2ms
  http = "127.0.0.1:9464"
  [retry]
  max-attempts = 3
  backoff = [10, 60, 300]
  jitter = 0.1
  [remote]
  pools = ["10.0.0.7:7400", "10.0.0.8:7400"]
  connect-timeout = 3s
  reconnect-max = 10s
  heartbeat-interval = 1s
  [tls]
  certificate = "/etc/cmdbus/worker.pem"
  key = "/etc/cmdbus/worker.key"
  ca-file = "/etc/cmdbus/ca.pem"
  [retention]
  commands = 30d
  processes = 30d
  batches = 30d
  archive = 7d
  interval = 1h
  chunk-size = 1000
  pause = 0ms
  [domains.reports]
  dsn = "host=db2 dbname=app"
  [admin]
  listen = "127.0.0.1:7500"
  [api]
  listen = "127.0.0.1:8780"
  tokens-file = "/etc/cmdbus/api-tokens"
  threads = 16
  connections = 4
)";

constexpr const char* node_usage = "cmdbus node";

constexpr const char* node_intro
  = R"(usage: cmdbus node --domain DOMAIN [--domain DOMAIN ...] [options]

Runs command handlers for workers elsewhere, without any database access: a
worker configured with this node's address (`[remote] pools`, or
--remote-pool HOST:PORT) connects, checks the protocol version, and sends it
the commands of the types this node has handlers for. Every side effect
stays on the worker. Handlers run at least once: when a node dies or its
connection drops, the worker makes its commands visible again at once and
they may run a second time elsewhere.
)";

constexpr const char* node_options_heading
  = "Options (environment variable in brackets; the command line wins over\n"
    "the environment, which wins over the config file):\n";

constexpr const char* node_prose = R"(
Durations are an integer with a unit: ms, s, min, h or d (500ms, 1s, 2min);
a bare integer is seconds.

Config file (CAF INI; ';' starts a comment):
  [node]
  domains = ["payments"]
  concurrency = 16
  listen = "0.0.0.0:7400"
  name = "node-1"
  heartbeat = 1s
  shutdown-timeout = 30s
  [tls]
  certificate = "/etc/cmdbus/node.pem"
  key = "/etc/cmdbus/node.key"
  ca-file = "/etc/cmdbus/ca.pem"
  [admin]
  listen = "127.0.0.1:7501"

TLS: give the certificate, its key and a CA file or directory together, or
none. With TLS both sides present certificates signed by a trusted CA (any
certificate of that CA is accepted: no host name check). Without TLS the
connection is cleartext and unauthenticated: anyone who reaches the port can
run the handlers with any payload, and commands and results can be read and
altered on the way. Off loopback, use TLS or a private network.
)";

/// Puts a help together: `intro` with the program's name in its usage line
/// and its description after it, the heading and the options, the prose
/// and the program's epilogue.
std::string assemble(const char* intro, const char* usage, const char* heading,
                     const std::vector<option_help>& options, const char* prose,
                     const detail::program_help& program) {
  std::string text = intro;
  auto at = text.find(usage);
  if (at != std::string::npos && !program.name.empty())
    text.replace(at, std::string_view{usage}.size(), program.name);
  if (!program.description.empty())
    text += "\n" + program.description + "\n";
  text += "\n";
  text += heading;
  text += render_options(options);
  text += prose;
  text += program.epilogue;
  return text;
}

} // namespace

namespace detail {

std::string worker_help(const program_help& program) {
  return assemble(worker_intro, worker_usage, "Options:\n",
                  options_help(worker_table(), false, program.options),
                  worker_prose, program);
}

std::string node_help(const program_help& program) {
  return assemble(node_intro, node_usage, node_options_heading,
                  options_help(node_table(), true, program.options), node_prose,
                  program);
}

} // namespace detail

const char* help_requested::what() const noexcept {
  return text_ != nullptr ? text_ : worker_help();
}

const char* worker_help() {
  static const std::string text = detail::worker_help({});
  return text.c_str();
}

const char* node_help() {
  static const std::string text = detail::node_help({});
  return text.c_str();
}

} // namespace cmdbus::config
