// The help text of `cmdbus worker`: its options, environment variables and
// an example config file. --log-level is listed here but read by the cmdbus
// tool before these options (cli::take_log_level in apps/cli.hpp), since
// every command takes it.

#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config {

const char* help_requested::what() const noexcept {
  return worker_help();
}

const char* worker_help() {
  return R"(usage: cmdbus worker [options]

Runs the command handlers of the configured domains until stopped (SIGINT or
SIGTERM), or drains every domain once with --tick.

Options:
  --config FILE            CAF-INI config file (else $CMDBUS_CONFIG, else none)
  --dsn DSN                libpq connection string or URI (default:
                           $CMDBUS_DSN, else the libpq environment)
  --domain D               domain to serve; repeat for several; replaces the
                           domains of the file and of $CMDBUS_DOMAINS
  --domain-dsn NAME=DSN    the served domain NAME lives on the database DSN
                           (default: --dsn); repeat for several domains
  --concurrency N          handler slots per domain, 1..4096 (16)
  --prefetch N             messages read ahead of free handler slots per
                           domain, 0..4096 (0)
  --visibility-timeout S   seconds or a duration, >= 1s (30s)
  --poll-interval DUR      poll period, 10ms..1h (1s)
  --no-notify              poll only, without LISTEN/NOTIFY
  --statement-timeout DUR  > 0 and below the visibility timeout (25s)
  --shutdown-timeout DUR   how long a stop waits for in-flight commands (30s)
  --flush-interval DUR     batching delay of side effects and of freed
                           handler slots, 0..1000ms (2ms)
  --max-attempts N         >= 1 (3); read for compatibility only: each
                           command's own max_attempts, set when it is sent,
                           decides when its retries run out
  --backoff LIST           retry delays in seconds (10,60,300); an empty
                           list (--backoff=) means 30s after every attempt
  --jitter X               random fraction 0..1 of each delay (0)
  --http ADDR:PORT          serve /healthz, /readyz, /metrics and a status
                           page on ADDR:PORT (off; e.g. 127.0.0.1:9464;
                           port 0 picks a free one)
  --remote-pool HOST:PORT  a handler node (`cmdbus node`) whose command types
                           run there; repeat for several; replaces the pools
                           of the file and of $CMDBUS_REMOTE_POOLS (none)
  --remote-connect-timeout DUR  one connection attempt, 100ms..1min (3s)
  --remote-reconnect-max DUR    longest wait between reconnection attempts,
                           250ms..10min (10s)
  --remote-heartbeat-interval DUR  connection heartbeat; three silent
                           intervals drop a pool, 100ms..1min (1s)
  --tls-certificate FILE   PEM certificate presented to the nodes; with
  --tls-key FILE           its key, and a CA (--tls-ca-file and/or
  --tls-ca-file FILE       --tls-ca-path DIR) that signed the nodes'
  --tls-ca-path DIR        certificates: all together or none (TLS off)
  --tls-passphrase TEXT    passphrase of an encrypted key (never printed;
                           prefer $CMDBUS_TLS_PASSPHRASE)
  --admin HOST:PORT        publish the admin actor for `cmdbus cluster
                           status/drain` (off; ":PORT" is 127.0.0.1; uses
                           the --tls-* set when given)
  --tick                   drain every domain once, then exit
  --dump-config            print the effective configuration and exit
  --log-level LEVEL        trace, debug, info, warn, error, critical or off
                           (info: start, stop, outages and recoveries,
                           completed batches; warn hides them)
  -h, --help               show this help

Durations are an integer with a unit: ms, s, min or h (250ms, 30s, 1min).
Precedence: defaults < config file < environment < command line.

Environment: CMDBUS_CONFIG, CMDBUS_DSN, CMDBUS_DOMAINS (a,b),
  CMDBUS_CONCURRENCY, CMDBUS_PREFETCH, CMDBUS_VISIBILITY_TIMEOUT,
  CMDBUS_POLL_INTERVAL, CMDBUS_USE_NOTIFY (true/false/1/0),
  CMDBUS_STATEMENT_TIMEOUT,
  CMDBUS_SHUTDOWN_TIMEOUT, CMDBUS_FLUSH_INTERVAL, CMDBUS_HTTP,
  CMDBUS_MAX_ATTEMPTS,
  CMDBUS_BACKOFF (10,60,300), CMDBUS_BACKOFF_JITTER,
  CMDBUS_REMOTE_POOLS (h1:7400,h2:7400), CMDBUS_REMOTE_CONNECT_TIMEOUT,
  CMDBUS_REMOTE_RECONNECT_MAX, CMDBUS_REMOTE_HEARTBEAT_INTERVAL,
  CMDBUS_TLS_CERTIFICATE, CMDBUS_TLS_KEY, CMDBUS_TLS_CA_FILE,
  CMDBUS_TLS_CA_PATH, CMDBUS_TLS_PASSPHRASE, CMDBUS_DOMAIN_DSN_<domain>
  (CMDBUS_DOMAIN_DSN_reports: that served domain's DSN); the log level:
  CMDBUS_LOG_LEVEL, else SPDLOG_LEVEL, else info.

Config file (CAF INI; ';' starts a comment):
  dsn = "host=db dbname=app"
  [worker]
  domains = ["payments", "reports"]
  concurrency = 16
  prefetch = 0
  visibility-timeout = 30s
  poll-interval = 1s
  use-notify = true
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
  [domains.reports]
  dsn = "host=db2 dbname=app"
  [admin]
  listen = "127.0.0.1:7500"
)";
}

} // namespace cmdbus::config
