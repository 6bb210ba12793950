#pragma once

// Configuration of the worker process (`cmdbus worker`): the settings, their
// validation, and how they are read from a CAF-INI file, the environment and
// the command line. No CAF or libpq includes.
//
// Precedence (later wins): defaults < file < environment < command line. The
// file is the one named by --config, else by $CMDBUS_CONFIG, else none (no
// default file is searched for).
//
// | file: [section] key        | environment              | option
// |------------------------------|--------------------------|-----------------
// | dsn (top level or [global])  | CMDBUS_DSN               | --dsn
// | dsn-file (the same)          | CMDBUS_DSN_FILE          | --dsn-file
// | pooler (top level or [global]) | CMDBUS_POOLER          | --pooler
// | [worker] domains             | CMDBUS_DOMAINS (a,b)     | --domain (many)
// | [worker] concurrency         | CMDBUS_CONCURRENCY       | --concurrency
// | [worker] prefetch            | CMDBUS_PREFETCH          | --prefetch
// | [worker] visibility-timeout  | CMDBUS_VISIBILITY_TIMEOUT| (same name)
// | [worker] poll-interval       | CMDBUS_POLL_INTERVAL     | (same name)
// | [worker] use-notify          | CMDBUS_USE_NOTIFY        | --no-notify
// | [worker] deferred-claims     | CMDBUS_DEFERRED_CLAIMS   | --no-deferred-claims
// | [worker] statement-timeout   | CMDBUS_STATEMENT_TIMEOUT | (same name)
// | [worker] shutdown-timeout    | CMDBUS_SHUTDOWN_TIMEOUT  | (same name)
// | [worker] flush-interval      | CMDBUS_FLUSH_INTERVAL    | (same name)
// | [worker] http                | CMDBUS_HTTP              | --http
// | [worker] tick                | -                        | --tick
// | [worker] busy-delay          | CMDBUS_BUSY_DELAY        | (same name)
// | [worker] idle-backoff-min    | CMDBUS_IDLE_BACKOFF_MIN  | (same name)
// | [worker] idle-backoff-max    | CMDBUS_IDLE_BACKOFF_MAX  | (same name)
// | [worker] idle-jitter         | CMDBUS_IDLE_JITTER       | (same name)
// | [worker] error-backoff-max   | CMDBUS_ERROR_BACKOFF_MAX | (same name)
// | [tick] runners               | CMDBUS_TICK_RUNNERS (a,b)| --tick-runners
// | [tick] max-duration          | CMDBUS_TICK_MAX_DURATION | --tick-max-duration
// | [tick] runner-max-duration   | CMDBUS_TICK_RUNNER_MAX_DURATION | --tick-runner-max-duration
// | [tick] runner-max-items      | CMDBUS_TICK_RUNNER_MAX_ITEMS | --tick-runner-max-items
// | [tick] shard-index           | CMDBUS_TICK_SHARD_INDEX  | --shard-index
// | [tick] shard-count           | CMDBUS_TICK_SHARD_COUNT  | --shard-count
// | [retry] max-attempts         | CMDBUS_MAX_ATTEMPTS      | --max-attempts
// | [retry] backoff              | CMDBUS_BACKOFF (10,60)   | --backoff
// | [retry] jitter               | CMDBUS_BACKOFF_JITTER    | --jitter
// | [remote] pools               | CMDBUS_REMOTE_POOLS (a,b)| --remote-pool (many)
// | [remote] connect-timeout     | CMDBUS_REMOTE_CONNECT_TIMEOUT | --remote-connect-timeout
// | [remote] reconnect-max       | CMDBUS_REMOTE_RECONNECT_MAX   | --remote-reconnect-max
// | [remote] heartbeat-interval  | CMDBUS_REMOTE_HEARTBEAT_INTERVAL | --remote-heartbeat-interval
// | [tls] certificate            | CMDBUS_TLS_CERTIFICATE   | --tls-certificate
// | [tls] key                    | CMDBUS_TLS_KEY           | --tls-key
// | [tls] ca-file                | CMDBUS_TLS_CA_FILE       | --tls-ca-file
// | [tls] ca-path                | CMDBUS_TLS_CA_PATH       | --tls-ca-path
// | [tls] passphrase             | CMDBUS_TLS_PASSPHRASE    | --tls-passphrase
// | [admin] listen               | CMDBUS_ADMIN             | --admin
// | [api] listen                 | CMDBUS_API               | --api
// | [api] tokens-file            | CMDBUS_API_TOKENS_FILE   | --api-tokens-file
// | [api] threads                | CMDBUS_API_THREADS       | --api-threads
// | [api] connections            | CMDBUS_API_CONNECTIONS   | --api-connections
// | [retention] commands         | CMDBUS_RETENTION_COMMANDS | --retention-commands
// | [retention] processes        | CMDBUS_RETENTION_PROCESSES | --retention-processes
// | [retention] batches          | CMDBUS_RETENTION_BATCHES | --retention-batches
// | [retention] archive          | CMDBUS_RETENTION_ARCHIVE | --retention-archive
// | [retention] interval         | CMDBUS_RETENTION_INTERVAL | --retention-interval
// | [retention] chunk-size       | CMDBUS_RETENTION_CHUNK_SIZE | --retention-chunk-size
// | [retention] pause            | CMDBUS_RETENTION_PAUSE   | --retention-pause
// | [domains.NAME] dsn           | CMDBUS_DOMAIN_DSN_NAME   | --domain-dsn NAME=DSN (many)
// | [domains.NAME] priorities    | -                        | -
// | [domains.NAME] fifo-every    | -                        | -
// | [domains.NAME.types.TYPE] concurrency | -               | -
// | [domains.NAME] schedules     | -                        | -
// | [domains.NAME.exec] TYPE     | -                        | --exec TYPE=COMMAND (many; every domain)
// | [domains.NAME.types.TYPE] exec-timeout | -              | --exec-timeout TYPE=DUR (every domain)
// | [exec] timeout               | CMDBUS_EXEC_TIMEOUT      | --exec-timeout
// | [exec] kill-grace            | CMDBUS_EXEC_KILL_GRACE   | --exec-kill-grace
// | [exec] max-output            | CMDBUS_EXEC_MAX_OUTPUT   | --exec-max-output
// | [exec] env                   | CMDBUS_EXEC_ENV (a,b)    | --exec-env (many)
//
// The [exec] settings and [domains.NAME.exec] run command types as
// external programs (exec_config, docs/exec.md).
//
// `priorities`, `fifo-every` and the per-type caps ([domains.NAME.types.TYPE]
// concurrency) are how the worker chooses and runs the domain's commands
// (domain_scheduling, docs/scheduling.md); file and API only.
//
// `dsn-file` names a file that holds the DSN (it may hold the password;
// db::read_dsn_file reads it and refuses a file that its group or others
// may read). It is another way to give `dsn`: the later place wins as for
// any setting, and one place (the file, the environment, the command line)
// that gives both is an error.
//
// A domain's own DSN (`[domains.payments] dsn = "..."`) puts that domain on
// another database; a domain without one uses `dsn`. NAME must be a served
// domain. The environment variable is read for each served domain (its name
// as written, e.g. CMDBUS_DOMAIN_DSN_payments); --domain-dsn repeats, one
// domain each (the last one of a domain wins).
//
// Value rules:
// - Durations are an integer with a unit: `ms`, `s`, `min`, `h` or `d`
//   (`250ms`, `30s`, `1min`, `30d`). A unit is required everywhere except for
//   visibility-timeout, where a bare integer means seconds (it must be a
//   whole number of seconds in any case).
// - File strings are quoted ("..." or '...'); lists are `[a, b]` and may span
//   lines; booleans are `true` / `false`; keys are kebab-case; `;` starts a
//   comment. Dotted keys, unknown sections or keys, duplicate keys and wrong
//   types are errors with `file:line`.
// - Environment lists are comma-separated; booleans also accept `1` / `0`;
//   a variable set to the empty string counts as unset.
// - Options take `--opt value` or `--opt=value`; when repeated, the last one
//   wins, except --domain and --remote-pool, which accumulate and replace the
//   domains (the remote pools) from the file and the environment.
//   `--backoff=` sets an empty schedule.

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <map>
#include <string_view>
#include <vector>

#include "cmdbus/config/api_config.hpp"
#include "cmdbus/config/common.hpp"
#include "cmdbus/config/exec_config.hpp"
#include "cmdbus/config/network_config.hpp"
#include "cmdbus/db/retention.hpp"
#include "cmdbus/db/pooler.hpp"

namespace cmdbus::config {

/// How failed commands are retried. The defaults (3 attempts, 10 s and then
/// 60 s apart) are the reference library's.
struct retry_config {
  /// Total attempts including the first one; >= 1. Read and validated so
  /// that the reference library's configuration files load, but not used:
  /// a command's own max_attempts (set when it is sent) decides when its
  /// retries run out (docs/design.md, "Retry exhaustion uses the command's
  /// max_attempts").
  int max_attempts = 3;

  /// Delay in seconds after attempt N (clamped to the last entry); each
  /// >= 0. May be empty, in which case every delay is 30 s.
  std::vector<int> backoff_seconds{10, 60, 300};

  /// Fraction (0..1) of each delay added or subtracted at random.
  double jitter = 0.0;
};

/// The remote handler pools of a worker (`cmdbus node` processes, or an
/// application's own handler nodes): commands of the types they serve run
/// there, while every side effect stays in the worker.
struct remote_config {
  /// The nodes to connect to, "HOST:PORT" each (see parse_node_address);
  /// empty (the default): no remote pools, and no network is started.
  std::vector<std::string> pools;

  /// How long one connection attempt (connect plus handshake) may take;
  /// 100 ms .. 1 min.
  std::chrono::milliseconds connect_timeout{3000};

  /// The longest wait between reconnection attempts (the backoff starts at
  /// 250 ms and doubles); 250 ms .. 10 min.
  std::chrono::milliseconds reconnect_max{10000};

  /// The heartbeat of the connections; a connection silent for three
  /// intervals counts as lost; 100 ms .. 1 min. The nodes must send
  /// heartbeats at most half that silence apart.
  std::chrono::milliseconds heartbeat_interval{1000};
};

/// How a worker chooses and runs one domain's commands (docs/scheduling.md,
/// "Priorities" and "Per-type concurrency"). The defaults read as the
/// reference worker does: oldest first, every type sharing every slot.
struct domain_scheduling {
  /// Read the highest "priority" first among the due commands (commands
  /// without one count as 0).
  bool priorities = false;

  /// With `priorities`, the starvation bound: at least one in every
  /// `fifo_every` commands the domain claims is the oldest due one,
  /// whatever its priority; 1..1000 (1: oldest first, as without
  /// priorities).
  int fifo_every = 10;

  /// The most commands of a type that run at once in this worker, by
  /// command type; each 1..4096. Other types keep every free slot: no
  /// message of a type at its cap is claimed.
  std::map<std::string, int> type_concurrency;

  /// Whether this worker fires the domain's recurring schedules
  /// ([domains.NAME] schedules; docs/scheduling.md, "Recurring
  /// schedules"). Any number of workers may: each slot fires once.
  bool schedules = true;

  /// Whether the domain's reads choose their messages (anything but the
  /// defaults).
  bool chooses() const noexcept {
    return priorities || !type_concurrency.empty();
  }
};

/// The worker's housekeeping runner ([retention]; docs/operations.md,
/// "Retention"): removes finished history older than its age per kind, in
/// chunks, on one replica at a time. Off unless an age is set.
struct retention_config {
  /// The ages per kind (commands, processes, batches, archive); each unset
  /// by default: that kind is kept for ever. Each >= 1 s when set.
  retention_ages ages;

  /// Time between passes (a pass prunes until nothing old is left);
  /// 10 ms .. 1 day.
  std::chrono::milliseconds interval{3'600'000};

  /// Most rows of a kind removed by one chunk (one transaction); 1..100000.
  int chunk_size = 1000;

  /// Wait between two chunks of a pass (to leave the database to the
  /// commands); 0 .. 1 min.
  std::chrono::milliseconds pause{0};

  /// Whether the runner runs (an age is set).
  bool enabled() const noexcept {
    return ages.any();
  }
};

/// `prefetch = auto`: the worker sizes each domain's prefetch itself.
inline constexpr int prefetch_auto = -1;

/// Everything `cmdbus worker` needs to run.
struct worker_config {
  /// libpq connection string or URI; "" means the libpq environment.
  std::string dsn;

  /// A file that holds the DSN (`dsn-file`), as given; load() (and
  /// apply_env()) read it into `dsn` and clear this (see the table above).
  std::string dsn_file;

  /// The DSNs of domains living on another database ([domains.NAME] dsn),
  /// by domain; every other domain uses `dsn`. Each key must be one of
  /// `domains`. Read through dsn_for().
  std::map<std::string, std::string> domain_dsn;

  /// The connection pooler in front of the databases ("none", "session",
  /// "transaction"; docs/operations.md, "Connection poolers"). Behind a
  /// transaction pooler the worker polls (no LISTEN, see listens()),
  /// prepares nothing by name, and needs the server to apply a statement
  /// timeout of at most statement_timeout itself.
  db::pooler_mode pooler = db::pooler_mode::none;

  /// The domains to serve; at least one, each a valid domain name
  /// (1..37 ASCII letters, digits or underscores), no duplicates.
  std::vector<std::string> domains;

  /// Priorities and per-type caps of domains, by domain ([domains.NAME]
  /// priorities / fifo-every, [domains.NAME.types.TYPE] concurrency); each
  /// key must be one of `domains`; a domain without an entry uses the
  /// defaults. Read through scheduling_of().
  std::map<std::string, domain_scheduling> scheduling;

  /// Handler slots per domain; 1..4096.
  int concurrency = 16;

  /// Messages a domain may read beyond its handler slots, waiting in memory
  /// for the next free handler (their lease is kept like a running
  /// command's); 0..4096, or prefetch_auto (the default): sized by the
  /// measured time a command holds a slot, 0 to 256
  /// (actors/worker/prefetch_tuner.hpp). More lets reads be larger and
  /// overlap the handlers' work; 0 reads only for free slots.
  int prefetch = prefetch_auto;

  /// Whether a read leaves the commands that qualify unclaimed until their
  /// handler has run, so that a quick success claims and completes the
  /// command with one write (docs/worker.md, "Deferred claims"). Reads
  /// that choose (priorities, per-type caps, shards) always claim.
  bool deferred_claims = true;

  /// How long a received message stays invisible; >= 1 s.
  std::chrono::seconds visibility_timeout{30};

  /// Poll period (and the wait for a notification); 10 ms .. 1 h.
  std::chrono::milliseconds poll_interval{1000};

  /// Whether to LISTEN for PGMQ notifications instead of polling only;
  /// ignored behind a transaction pooler (see listens()).
  bool use_notify = true;

  /// Retry policy of failed commands.
  retry_config retry;

  /// Server-side statement timeout; > 0 and below visibility_timeout.
  std::chrono::milliseconds statement_timeout{25000};

  /// How long a stop waits for in-flight commands; >= 0.
  std::chrono::milliseconds shutdown_timeout{30000};

  /// Batching delay of side effects (writers) and of freed handler slots
  /// returned to the poller; 0 .. 1000 ms.
  std::chrono::milliseconds flush_interval{2};

  /// Where the worker serves its HTTP endpoint (health, readiness,
  /// metrics, status page): "ADDR:PORT" (see parse_http_address); "" (the
  /// default) serves nothing.
  std::string http;

  /// Remote handler pools ([remote]).
  remote_config remote;

  /// The certificate set of the connections to remote pools ([tls]); empty:
  /// cleartext, unauthenticated connections.
  tls_config tls;

  /// Where the worker publishes its admin actor (`cmdbus cluster status`,
  /// `cmdbus cluster drain`): "HOST:PORT", ":PORT" = 127.0.0.1, port 0 a
  /// free one; "" (the default) publishes nothing. Same TLS set as the
  /// remote pools ([tls]).
  std::string admin;

  /// The command API served beside the worker ([api]; docs/api.md): off
  /// unless `api.listen` is set. Over HTTPS with the [tls] set when it is
  /// given (which has a CA: clients then present certificates, mutual
  /// TLS). The program must be able to serve it (worker_program::serve_api).
  api_config api;

  /// Run one drain of every domain and exit.
  bool tick = false;

  /// Whether the worker runs its scheduler, which fires the recurring
  /// schedules of its domains (those whose `domain_scheduling::schedules`
  /// is set). API only; the file turns it off per domain.
  bool run_schedules = true;

  // -- the background loop's timing (docs/worker.md, "Loop timing") ---------

  /// After a read that filled every free slot (more may be waiting): the
  /// delay before the next read; 0 (the default) reads again at once.
  std::chrono::milliseconds busy_delay{0};
  /// After empty reads the poller waits idle_backoff_min, doubling per
  /// empty read up to idle_backoff_max, each +/- idle_jitter; a NOTIFY or a
  /// freed slot still wakes it at once. Unset: a quarter of poll_interval
  /// and poll_interval (see idle_backoff_min_of / idle_backoff_max_of).
  std::optional<std::chrono::milliseconds> idle_backoff_min;
  std::optional<std::chrono::milliseconds> idle_backoff_max;
  /// Random fraction 0..1 of each idle delay added or taken away.
  double idle_jitter = 0.2;
  /// Longest wait between attempts while the database fails (the wait
  /// starts at 100 ms and doubles, drawn from [wait/2, wait]).
  std::chrono::milliseconds error_backoff_max{5000};

  // -- tick runs ([tick], docs/scheduling.md "Tick runs and budgets") --------

  /// The runners of a tick run, in order: "commands" (each served domain's
  /// commands, one runner per domain: "commands:NAME"), "schedules" (each
  /// domain's recurring schedules: "schedules:NAME"), "jobs" (the singleton
  /// jobs), or a runner the application registered. Empty: the default
  /// order (commands, schedules, jobs).
  std::vector<std::string> tick_runners;
  /// Overall budget of a tick run; 0: none.
  std::chrono::milliseconds tick_max_duration{0};
  /// Budget of each runner: duration (0: none) and items (0: none).
  std::chrono::milliseconds tick_runner_max_duration{0};
  int64_t tick_runner_max_items = 0;
  /// The share of the work of a tick run among tick_shard_count parallel
  /// runs (commands whose message id modulo the count is the index; jobs
  /// whose name's hash is); count 0 or 1: everything.
  int tick_shard_index = 0;
  int tick_shard_count = 0;

  // -- retention ([retention], docs/operations.md "Retention") -------------

  /// The housekeeping runner: off unless an age is set.
  retention_config retention;

  // -- external programs ([exec], docs/exec.md) -----------------------------

  /// Command types run by external programs, and their bounds.
  exec_config exec;

  /// Set by --dump-config only: print describe() and exit instead of
  /// running. Not a setting of the file or the environment.
  bool dump_config = false;
};

/// The idle backoff's floor: idle_backoff_min, else a quarter of
/// poll_interval (at least 1 ms).
std::chrono::milliseconds idle_backoff_min_of(const worker_config& cfg);

/// The idle backoff's cap: idle_backoff_max, else poll_interval.
std::chrono::milliseconds idle_backoff_max_of(const worker_config& cfg);

/// The prefetch a domain starts with: the configured one, 0 when auto.
int starting_prefetch(const worker_config& cfg) noexcept;

/// The most a domain's prefetch can be: the configured one, or the auto
/// prefetch's limit (256).
int max_prefetch(const worker_config& cfg) noexcept;

/// Whether the worker LISTENs for notifications: use_notify, unless a
/// transaction pooler is in front (it would hand the listening session to
/// other clients, and the notifications would be lost).
bool listens(const worker_config& cfg) noexcept;

/// The DSN of `domain`: its own ([domains.NAME] dsn), else the worker's.
const std::string& dsn_for(const worker_config& cfg, const std::string& domain);

/// The scheduling of `domain`: its entry in `cfg.scheduling`, else the
/// defaults.
const domain_scheduling& scheduling_of(const worker_config& cfg,
                                       const std::string& domain);

/// Domains that share one database.
struct dsn_group {
  std::string dsn;
  /// In the order given.
  std::vector<std::string> domains;
};

/// Groups `domains` by their DSN (dsn_for), the groups in the order of
/// their first domain: one connection per database for whatever concerns
/// several domains (queue creation, schema checks, figures).
std::vector<dsn_group> group_by_dsn(const worker_config& cfg,
                                    const std::vector<std::string>& domains);

/// Problems found in the configuration; empty when valid. Each string is one
/// clear sentence naming the setting, its value and the rule, e.g.
/// "statement-timeout (30000ms) must be below visibility-timeout (30s)".
std::vector<std::string> validate(const worker_config& cfg);



/// Applies a CAF-INI text onto `cfg`; `file_name` is used in messages.
/// Throws config_error.
void apply_ini(worker_config& cfg, std::string_view text,
               const std::string& file_name);

/// Applies the CMDBUS_* environment variables (except CMDBUS_CONFIG, which
/// load() reads), CMDBUS_DOMAIN_DSN_<name> for the domains known once
/// CMDBUS_DOMAINS is applied. Throws config_error.
void apply_env(worker_config& cfg, const env_lookup& getenv);

/// Applies command-line options (the arguments after `cmdbus worker`) onto
/// `cfg` and returns the path given by --config, if any (the file itself is
/// not read here; see load()). Throws help_requested for --help / -h, and
/// config_error for unknown options, positional arguments, missing or bad
/// values.
std::optional<std::string> apply_args(worker_config& cfg,
                                      const std::vector<std::string>& args);

/// The whole sequence: defaults, then the file (from --config, else
/// $CMDBUS_CONFIG, else none), then the environment, then the command line;
/// then validate(). Throws help_requested (before reading any file), or
/// config_error for parse errors and, when invalid, with all problems, one
/// per line.
worker_config load(const std::vector<std::string>& args,
                   const env_lookup& getenv);

/// Returns the help text for `cmdbus worker`.
const char* worker_help();

/// Renders the effective configuration as a CAF-INI text that apply_ini()
/// accepts (the DSN's secrets masked by db::mask_dsn), for logs and
/// --dump-config.
std::string describe(const worker_config& cfg);

} // namespace cmdbus::config
