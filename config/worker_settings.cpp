// The worker's settings table: each setting's key in the file, its
// environment variable, its option with the help --help shows, and where
// its value goes (see the table in config/worker_config.hpp).

#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/dsn.hpp"

namespace cmdbus::config::detail {

namespace {

/// The prefix of a domain's DSN variable: CMDBUS_DOMAIN_DSN_<domain>.
constexpr const char* domain_dsn_env_prefix = "CMDBUS_DOMAIN_DSN_";

/// Stores `--domain-dsn NAME=DSN`'s value. Throws value_error.
void store_domain_dsn_option(worker_config& cfg, const raw_value& v, bool) {
  std::string_view value = v.text;
  auto eq = value.find('=');
  if (eq == std::string_view::npos || eq == 0)
    // Never echo: the value is mostly a DSN, which may hold a password.
    throw value_error("expects NAME=DSN (a served domain and its DSN)");
  auto dsn = value.substr(eq + 1);
  if (trim(dsn).empty())
    throw value_error("expects NAME=DSN with a DSN after the '='");
  cfg.domain_dsn[std::string{value.substr(0, eq)}] = std::string{dsn};
}

/// Stores `dsn = "..."` of a [domains.NAME] section.
void store_domain_dsn_entry(worker_config& cfg, const std::string& domain,
                            const std::string&, const raw_value& v) {
  cfg.domain_dsn[domain] = as_string(v);
}

/// Stores `priorities = true|false` of a [domains.NAME] section.
void store_priorities_entry(worker_config& cfg, const std::string& domain,
                            const std::string&, const raw_value& v) {
  cfg.scheduling[domain].priorities = as_bool(v, false);
}

/// Stores `fifo-every = N` of a [domains.NAME] section.
void store_fifo_every_entry(worker_config& cfg, const std::string& domain,
                            const std::string&, const raw_value& v) {
  cfg.scheduling[domain].fifo_every = as_int(v);
}

/// Stores `schedules = true|false` of a [domains.NAME] section.
void store_schedules_entry(worker_config& cfg, const std::string& domain,
                           const std::string&, const raw_value& v) {
  cfg.scheduling[domain].schedules = as_bool(v, false);
}

/// Stores `concurrency = N` of a [domains.NAME.types.TYPE] section.
void store_type_concurrency_entry(worker_config& cfg, const std::string& domain,
                                  const std::string& type, const raw_value& v) {
  cfg.scheduling[domain].type_concurrency[type] = as_int(v);
}

/// Applies the CMDBUS_DOMAIN_DSN_<domain> variables of the served domains,
/// except those of the domains whose DSN the command line set.
void apply_domain_dsn_env(worker_config& cfg, const env_lookup& getenv,
                          const worker_config& command_line) {
  for (const auto& domain : cfg.domains) {
    if (command_line.domain_dsn.count(domain) != 0)
      continue;
    auto name = domain_dsn_env_prefix + domain;
    auto value = getenv(name.c_str());
    if (value && !value->empty())
      cfg.domain_dsn[domain] = *value;
  }
}

/// Reads the DSN file that the place which gives the DSN names, into
/// `cfg.dsn`: the command line (`command_line`), else the environment, else
/// the config file; one place that gives both a DSN and a DSN file is an
/// error. Throws config_error naming the place.
void resolve_dsn_file(worker_config& cfg, const env_lookup& getenv,
                      const worker_config& command_line) {
  auto env_dsn = getenv("CMDBUS_DSN");
  auto env_file = getenv("CMDBUS_DSN_FILE");
  bool env_gives_dsn = env_dsn && !env_dsn->empty();
  bool env_gives_file = env_file && !env_file->empty();
  std::string file;
  std::string place;
  if (!command_line.dsn.empty() || !command_line.dsn_file.empty()) {
    if (!command_line.dsn.empty() && !command_line.dsn_file.empty())
      throw config_error("give --dsn or --dsn-file, not both");
    file = command_line.dsn_file;
    place = "option --dsn-file";
  } else if (env_gives_dsn || env_gives_file) {
    if (env_gives_dsn && env_gives_file)
      throw config_error("set CMDBUS_DSN or CMDBUS_DSN_FILE in the "
                         "environment, not both");
    file = env_gives_file ? *env_file : "";
    place = "environment variable CMDBUS_DSN_FILE";
  } else if (!cfg.dsn_file.empty()) {
    if (!cfg.dsn.empty())
      throw config_error("the config file sets both dsn and dsn-file: keep "
                         "one");
    file = cfg.dsn_file;
    place = "key 'dsn-file' of the config file";
  }
  cfg.dsn_file.clear();
  if (file.empty())
    return;
  try {
    cfg.dsn = db::read_dsn_file(file);
  } catch (const db::invalid_argument& e) {
    throw config_error(place + " cannot be used: " + e.what());
  }
}

/// What is read once the rest is known: the DSN file and the served
/// domains' CMDBUS_DOMAIN_DSN_<domain>.
void late_settings(worker_config& cfg, const env_lookup& getenv,
                   const worker_config& command_line) {
  resolve_dsn_file(cfg, getenv, command_line);
  apply_domain_dsn_env(cfg, getenv, command_line);
}

settings_table<worker_config> make_worker_table() {
  using c = worker_config;
  using v = raw_value;
  std::vector<setting<c>> rows{
    {kind::string,
     "",
     "dsn",
     "CMDBUS_DSN",
     form::value,
     {"--dsn", "DSN",
      "libpq connection string or URI (default: $CMDBUS_DSN, else the libpq "
      "environment)"},
     [](c& x, const v& y, bool) { x.dsn = as_string(y); }},
    // Read once every place is known (resolve_dsn_file).
    {kind::string,
     "",
     "dsn-file",
     "CMDBUS_DSN_FILE",
     form::value,
     {"--dsn-file", "PATH",
      "read the DSN from PATH, a file only its owner may read (mode 600); "
      "instead of --dsn"},
     [](c& x, const v& y, bool) { x.dsn_file = as_string(y); }},
    {kind::string,
     "",
     "pooler",
     "CMDBUS_POOLER",
     form::value,
     {"--pooler", "MODE",
      "the connection pooler in front of the database: none, session or "
      "transaction (none; transaction: polls, no LISTEN)"},
     [](c& x, const v& y, bool) {
       auto mode = db::parse_pooler(as_string(y));
       if (!mode)
         throw value_error("expects none, session or transaction");
       x.pooler = *mode;
     }},
    {kind::string_list,
     "worker",
     "domains",
     "CMDBUS_DOMAINS",
     form::each,
     {"--domain", "D",
      "domain to serve; repeat for several; replaces the domains of the file "
      "and of $CMDBUS_DOMAINS"},
     [](c& x, const v& y, bool) { x.domains = as_string_list(y); }},
    // Per domain: [domains.NAME] dsn (the table's named section) and
    // CMDBUS_DOMAIN_DSN_<domain> (late_env).
    {kind::string,
     "",
     "",
     nullptr,
     form::value,
     {"--domain-dsn", "NAME=DSN",
      "the served domain NAME lives on the database DSN (default: --dsn); "
      "repeat for several domains"},
     store_domain_dsn_option},
    {kind::integer,
     "worker",
     "concurrency",
     "CMDBUS_CONCURRENCY",
     form::value,
     {"--concurrency", "N", "handler slots per domain, 1..4096 (16)"},
     [](c& x, const v& y, bool) { x.concurrency = as_int(y); }},
    {kind::integer,
     "worker",
     "prefetch",
     "CMDBUS_PREFETCH",
     form::value,
     {"--prefetch", "N",
      "messages read ahead of free handler slots per domain, 0..4096, or "
      "auto: sized by the measured handler time, 0..256 (auto)"},
     [](c& x, const v& y, bool) {
       x.prefetch = y.shape == raw_value::form::bare && y.text == "auto"
                      ? prefetch_auto
                      : as_int(y);
     }},
    {kind::seconds_duration,
     "worker",
     "visibility-timeout",
     "CMDBUS_VISIBILITY_TIMEOUT",
     form::value,
     {"--visibility-timeout", "S", "seconds or a duration, >= 1s (30s)"},
     [](c& x, const v& y, bool) { x.visibility_timeout = as_seconds(y); }},
    {kind::duration,
     "worker",
     "poll-interval",
     "CMDBUS_POLL_INTERVAL",
     form::value,
     {"--poll-interval", "DUR", "poll period, 10ms..1h (1s)"},
     [](c& x, const v& y, bool) { x.poll_interval = as_duration(y, false); }},
    {kind::boolean,
     "worker",
     "use-notify",
     "CMDBUS_USE_NOTIFY",
     form::clear,
     {"--no-notify", "", "poll only, without LISTEN/NOTIFY"},
     [](c& x, const v& y, bool lenient) {
       x.use_notify = as_bool(y, lenient);
     }},
    {kind::boolean,
     "worker",
     "deferred-claims",
     "CMDBUS_DEFERRED_CLAIMS",
     form::clear,
     {"--no-deferred-claims", "",
      "claim every command at its read (docs/worker.md)"},
     [](c& x, const v& y, bool lenient) {
       x.deferred_claims = as_bool(y, lenient);
     }},
    {kind::duration,
     "worker",
     "statement-timeout",
     "CMDBUS_STATEMENT_TIMEOUT",
     form::value,
     {"--statement-timeout", "DUR",
      "> 0 and below the visibility timeout (25s)"},
     [](c& x, const v& y, bool) {
       x.statement_timeout = as_duration(y, false);
     }},
    {kind::duration,
     "worker",
     "shutdown-timeout",
     "CMDBUS_SHUTDOWN_TIMEOUT",
     form::value,
     {"--shutdown-timeout", "DUR",
      "how long a stop waits for in-flight commands (30s)"},
     [](c& x, const v& y, bool) {
       x.shutdown_timeout = as_duration(y, false);
     }},
    {kind::duration,
     "worker",
     "flush-interval",
     "CMDBUS_FLUSH_INTERVAL",
     form::value,
     {"--flush-interval", "DUR",
      "batching delay of side effects and of freed handler slots, "
      "0..1000ms (2ms)"},
     [](c& x, const v& y, bool) { x.flush_interval = as_duration(y, false); }},
    {kind::string,
     "worker",
     "http",
     "CMDBUS_HTTP",
     form::value,
     {"--http", "ADDR:PORT",
      "serve /healthz, /readyz, /metrics and a status page on ADDR:PORT "
      "(off; e.g. 127.0.0.1:9464; port 0 picks a free one)"},
     [](c& x, const v& y, bool) { x.http = as_string(y); }},
    {kind::boolean,
     "worker",
     "tick",
     nullptr,
     form::set,
     {"--tick", "",
      "run the tick runners once (each domain's commands, then the "
      "singleton jobs; see [tick]), then exit"},
     [](c& x, const v& y, bool lenient) { x.tick = as_bool(y, lenient); }},
    {kind::duration,
     "worker",
     "busy-delay",
     "CMDBUS_BUSY_DELAY",
     form::value,
     {"--busy-delay", "DUR",
      "delay before reading again after a read that filled every free "
      "slot, 0..1min (0ms: at once)"},
     [](c& x, const v& y, bool) { x.busy_delay = as_duration(y, false); }},
    {kind::duration,
     "worker",
     "idle-backoff-min",
     "CMDBUS_IDLE_BACKOFF_MIN",
     form::value,
     {"--idle-backoff-min", "DUR",
      "wait after the first empty read, doubling per empty read, >= 1ms (a "
      "quarter of the poll interval)"},
     [](c& x, const v& y, bool) {
       x.idle_backoff_min = as_duration(y, false);
     }},
    {kind::duration,
     "worker",
     "idle-backoff-max",
     "CMDBUS_IDLE_BACKOFF_MAX",
     form::value,
     {"--idle-backoff-max", "DUR",
      "longest wait between empty reads, >= idle-backoff-min and <= 1h (the "
      "poll interval)"},
     [](c& x, const v& y, bool) {
       x.idle_backoff_max = as_duration(y, false);
     }},
    {kind::real,
     "worker",
     "idle-jitter",
     "CMDBUS_IDLE_JITTER",
     form::value,
     {"--idle-jitter", "X",
      "random fraction 0..1 added to or taken from each idle wait (0.2)"},
     [](c& x, const v& y, bool) { x.idle_jitter = as_real(y); }},
    {kind::duration,
     "worker",
     "error-backoff-max",
     "CMDBUS_ERROR_BACKOFF_MAX",
     form::value,
     {"--error-backoff-max", "DUR",
      "longest wait between reads while the database fails, 100ms..10min "
      "(5s)"},
     [](c& x, const v& y, bool) {
       x.error_backoff_max = as_duration(y, false);
     }},
    {kind::string_list,
     "tick",
     "runners",
     "CMDBUS_TICK_RUNNERS",
     form::value,
     {"--tick-runners", "LIST",
      "with --tick: the runners in order, comma-separated: commands (each "
      "domain's), schedules (each domain's recurring schedules), jobs, or an "
      "application's own (commands,schedules,jobs)"},
     [](c& x, const v& y, bool) { x.tick_runners = as_string_list(y); }},
    {kind::duration,
     "tick",
     "max-duration",
     "CMDBUS_TICK_MAX_DURATION",
     form::value,
     {"--tick-max-duration", "DUR",
      "with --tick: overall budget; runners not reached are left for the "
      "next run (none)"},
     [](c& x, const v& y, bool) {
       x.tick_max_duration = as_duration(y, false);
     }},
    {kind::duration,
     "tick",
     "runner-max-duration",
     "CMDBUS_TICK_RUNNER_MAX_DURATION",
     form::value,
     {"--tick-runner-max-duration", "DUR",
      "with --tick: budget of each runner; it takes no new item after it "
      "(none)"},
     [](c& x, const v& y, bool) {
       x.tick_runner_max_duration = as_duration(y, false);
     }},
    {kind::integer,
     "tick",
     "runner-max-items",
     "CMDBUS_TICK_RUNNER_MAX_ITEMS",
     form::value,
     {"--tick-runner-max-items", "N",
      "with --tick: most items (commands, job runs) of each runner (none)"},
     [](c& x, const v& y, bool) { x.tick_runner_max_items = as_int(y); }},
    {kind::integer,
     "tick",
     "shard-index",
     "CMDBUS_TICK_SHARD_INDEX",
     form::value,
     {"--shard-index", "I",
      "with --tick and --shard-count: this run's share, 0..N-1 (0)"},
     [](c& x, const v& y, bool) { x.tick_shard_index = as_int(y); }},
    {kind::integer,
     "tick",
     "shard-count",
     "CMDBUS_TICK_SHARD_COUNT",
     form::value,
     {"--shard-count", "N",
      "with --tick: parallel runs sharing the work, each with its own "
      "--shard-index; they never take the same command or job, 0..1024 "
      "(none)"},
     [](c& x, const v& y, bool) { x.tick_shard_count = as_int(y); }},
    {kind::integer,
     "retry",
     "max-attempts",
     "CMDBUS_MAX_ATTEMPTS",
     form::value,
     {"--max-attempts", "N",
      ">= 1 (3); read for compatibility only: each command's own "
      "max_attempts, set when it is sent, decides when its retries run out"},
     [](c& x, const v& y, bool) { x.retry.max_attempts = as_int(y); }},
    {kind::integer_list,
     "retry",
     "backoff",
     "CMDBUS_BACKOFF",
     form::value,
     {"--backoff", "LIST",
      "retry delays in seconds (10,60,300); an empty list (--backoff=) means "
      "30s after every attempt"},
     [](c& x, const v& y, bool) { x.retry.backoff_seconds = as_int_list(y); }},
    {kind::real,
     "retry",
     "jitter",
     "CMDBUS_BACKOFF_JITTER",
     form::value,
     {"--jitter", "X", "random fraction 0..1 of each delay (0)"},
     [](c& x, const v& y, bool) { x.retry.jitter = as_real(y); }},
    {kind::string_list,
     "remote",
     "pools",
     "CMDBUS_REMOTE_POOLS",
     form::each,
     {"--remote-pool", "HOST:PORT",
      "a handler node (`cmdbus node`) whose command types run there; repeat "
      "for several; replaces the pools of the file and of "
      "$CMDBUS_REMOTE_POOLS (none)"},
     [](c& x, const v& y, bool) { x.remote.pools = as_string_list(y); }},
    {kind::duration,
     "remote",
     "connect-timeout",
     "CMDBUS_REMOTE_CONNECT_TIMEOUT",
     form::value,
     {"--remote-connect-timeout", "DUR",
      "one connection attempt, 100ms..1min (3s)"},
     [](c& x, const v& y, bool) {
       x.remote.connect_timeout = as_duration(y, false);
     }},
    {kind::duration,
     "remote",
     "reconnect-max",
     "CMDBUS_REMOTE_RECONNECT_MAX",
     form::value,
     {"--remote-reconnect-max", "DUR",
      "longest wait between reconnection attempts, 250ms..10min (10s)"},
     [](c& x, const v& y, bool) {
       x.remote.reconnect_max = as_duration(y, false);
     }},
    {kind::duration,
     "remote",
     "heartbeat-interval",
     "CMDBUS_REMOTE_HEARTBEAT_INTERVAL",
     form::value,
     {"--remote-heartbeat-interval", "DUR",
      "connection heartbeat; three silent intervals drop a pool, "
      "100ms..1min (1s)"},
     [](c& x, const v& y, bool) {
       x.remote.heartbeat_interval = as_duration(y, false);
     }},
  };
  // [retention]: the housekeeping runner (docs/operations.md).
  rows.push_back(
    {kind::duration,
     "retention",
     "commands",
     "CMDBUS_RETENTION_COMMANDS",
     form::value,
     {"--retention-commands", "AGE",
      "remove finished commands (with their audit) older than AGE, e.g. 30d "
      "(kept)"},
     [](c& x, const v& y, bool) {
       x.retention.ages.commands = as_duration(y, false);
     }});
  rows.push_back(
    {kind::duration,
     "retention",
     "processes",
     "CMDBUS_RETENTION_PROCESSES",
     form::value,
     {"--retention-processes", "AGE",
      "remove final processes (with their audit) older than AGE (kept)"},
     [](c& x, const v& y, bool) {
       x.retention.ages.processes = as_duration(y, false);
     }});
  rows.push_back(
    {kind::duration,
     "retention",
     "batches",
     "CMDBUS_RETENTION_BATCHES",
     form::value,
     {"--retention-batches", "AGE",
      "remove final batches without commands left, older than AGE (kept)"},
     [](c& x, const v& y, bool) {
       x.retention.ages.batches = as_duration(y, false);
     }});
  rows.push_back(
    {kind::duration,
     "retention",
     "archive",
     "CMDBUS_RETENTION_ARCHIVE",
     form::value,
     {"--retention-archive", "AGE",
      "remove archived queue messages older than AGE (kept)"},
     [](c& x, const v& y, bool) {
       x.retention.ages.archive = as_duration(y, false);
     }});
  rows.push_back(
    {kind::duration,
     "retention",
     "interval",
     "CMDBUS_RETENTION_INTERVAL",
     form::value,
     {"--retention-interval", "DUR",
      "time between retention passes, 10ms..1d (1h)"},
     [](c& x, const v& y, bool) {
       x.retention.interval = as_duration(y, false);
     }});
  rows.push_back(
    {kind::integer,
     "retention",
     "chunk-size",
     "CMDBUS_RETENTION_CHUNK_SIZE",
     form::value,
     {"--retention-chunk-size", "N",
      "most rows of a kind removed per transaction, 1..100000 (1000)"},
     [](c& x, const v& y, bool) { x.retention.chunk_size = as_int(y); }});
  rows.push_back(
    {kind::duration,
     "retention",
     "pause",
     "CMDBUS_RETENTION_PAUSE",
     form::value,
     {"--retention-pause", "DUR",
      "wait between two retention chunks, 0..1min (0ms)"},
     [](c& x, const v& y, bool) {
       x.retention.pause = as_duration(y, false);
     }});
  for (auto& row : tls_settings<c>())
    rows.push_back(row);
  for (auto& row : exec_settings())
    rows.push_back(row);
  rows.push_back(
    {kind::string,
     "admin",
     "listen",
     "CMDBUS_ADMIN",
     form::value,
     {"--admin", "HOST:PORT",
      "publish the admin actor for `cmdbus cluster status/drain` (off; "
      "\":PORT\" is 127.0.0.1; uses the --tls-* set when given)"},
     [](c& x, const v& y, bool) { x.admin = as_string(y); }});
  rows.push_back(
    {kind::string,
     "api",
     "listen",
     "CMDBUS_API",
     form::value,
     {"--api", "ADDR:PORT",
      "also serve the command API there (off; docs/api.md; HTTPS with the "
      "--tls-* set when given, clients then need certificates of its CA); "
      "needs tokens"},
     [](c& x, const v& y, bool) { x.api.listen = as_string(y); }});
  rows.push_back(
    {kind::string,
     "api",
     "tokens-file",
     "CMDBUS_API_TOKENS_FILE",
     form::value,
     {"--api-tokens-file", "PATH",
      "the command API's tokens, a file only its owner may read (else "
      "$CMDBUS_API_TOKENS)"},
     [](c& x, const v& y, bool) { x.api.tokens_file = as_string(y); }});
  rows.push_back(
    {kind::integer,
     "api",
     "threads",
     "CMDBUS_API_THREADS",
     form::value,
     {"--api-threads", "N",
      "the command API's requests answered at once, 1..1024 (16)"},
     [](c& x, const v& y, bool) { x.api.threads = as_int(y); }});
  rows.push_back(
    {kind::integer,
     "api",
     "connections",
     "CMDBUS_API_CONNECTIONS",
     form::value,
     {"--api-connections", "N",
      "the command API's database connections, 1..256 (4)"},
     [](c& x, const v& y, bool) { x.api.connections = as_int(y); }});
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
          {"worker", "tick", "retry", "remote", "tls", "exec", "admin",
           "api", "retention"},
          {"domains.",
           {{"dsn", store_domain_dsn_entry},
            {"priorities", store_priorities_entry},
            {"fifo-every", store_fifo_every_entry},
            {"schedules", store_schedules_entry}},
           "types",
           "TYPE",
           {{"concurrency", store_type_concurrency_entry},
            {"exec-timeout", store_exec_timeout_entry}},
           "exec",
           "TYPE",
           store_exec_entry},
          {"--config", "FILE",
           "CAF-INI config file (else $CMDBUS_CONFIG, else none)"},
          "CMDBUS_CONFIG",
          worker_help,
          late_settings};
}

} // namespace

const settings_table<worker_config>& worker_table() {
  static const auto table = make_worker_table();
  return table;
}

} // namespace cmdbus::config::detail
