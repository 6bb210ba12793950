#pragma once

// The worker's settings: one table naming each setting in the config file,
// the environment and on the command line, and the lookups that the INI
// parser, apply_env() and apply_args() share. Internal to cmdbus_config.

#include <string>
#include <string_view>

namespace cmdbus::config::detail {

// -- the settings ------------------------------------------------------------

/// How a setting's value is written.
enum class kind {
  string,
  string_list,
  integer,
  integer_list,
  real,
  boolean,
  /// An integer with a unit (ms, s, min, h).
  duration,
  /// Like `duration`, but a bare integer means seconds; whole seconds only.
  seconds_duration,
};

/// Names a setting; assign() stores a value by it.
enum class setting_id {
  dsn,
  domains,
  concurrency,
  prefetch,
  visibility_timeout,
  poll_interval,
  use_notify,
  statement_timeout,
  shutdown_timeout,
  flush_interval,
  http,
  tick,
  max_attempts,
  backoff,
  jitter,
  remote_pools,
  remote_connect_timeout,
  remote_reconnect_max,
  remote_heartbeat_interval,
  tls_certificate,
  tls_key,
  tls_ca_file,
  tls_ca_path,
  tls_passphrase,
  admin_listen,
};

/// One setting and its names in the file, the environment and the CLI.
struct setting {
  setting_id id;
  kind type;
  /// Section in the file; "" is the top level.
  std::string_view section;
  std::string_view key;
  /// Environment variable, or nullptr.
  const char* env;
  /// Command-line option taking a value, or "".
  std::string_view option;
};

/// Every setting, in the order describe() and the help list them.
inline constexpr setting settings[] = {
  {setting_id::dsn, kind::string, "", "dsn", "CMDBUS_DSN", "--dsn"},
  {setting_id::domains, kind::string_list, "worker", "domains",
   "CMDBUS_DOMAINS", ""},
  {setting_id::concurrency, kind::integer, "worker", "concurrency",
   "CMDBUS_CONCURRENCY", "--concurrency"},
  {setting_id::prefetch, kind::integer, "worker", "prefetch", "CMDBUS_PREFETCH",
   "--prefetch"},
  {setting_id::visibility_timeout, kind::seconds_duration, "worker",
   "visibility-timeout", "CMDBUS_VISIBILITY_TIMEOUT", "--visibility-timeout"},
  {setting_id::poll_interval, kind::duration, "worker", "poll-interval",
   "CMDBUS_POLL_INTERVAL", "--poll-interval"},
  {setting_id::use_notify, kind::boolean, "worker", "use-notify",
   "CMDBUS_USE_NOTIFY", ""},
  {setting_id::statement_timeout, kind::duration, "worker", "statement-timeout",
   "CMDBUS_STATEMENT_TIMEOUT", "--statement-timeout"},
  {setting_id::shutdown_timeout, kind::duration, "worker", "shutdown-timeout",
   "CMDBUS_SHUTDOWN_TIMEOUT", "--shutdown-timeout"},
  {setting_id::flush_interval, kind::duration, "worker", "flush-interval",
   "CMDBUS_FLUSH_INTERVAL", "--flush-interval"},
  {setting_id::http, kind::string, "worker", "http", "CMDBUS_HTTP", "--http"},
  {setting_id::tick, kind::boolean, "worker", "tick", nullptr, ""},
  {setting_id::max_attempts, kind::integer, "retry", "max-attempts",
   "CMDBUS_MAX_ATTEMPTS", "--max-attempts"},
  {setting_id::backoff, kind::integer_list, "retry", "backoff",
   "CMDBUS_BACKOFF", "--backoff"},
  {setting_id::jitter, kind::real, "retry", "jitter", "CMDBUS_BACKOFF_JITTER",
   "--jitter"},
  // --remote-pool repeats and replaces (args.cpp), like --domain.
  {setting_id::remote_pools, kind::string_list, "remote", "pools",
   "CMDBUS_REMOTE_POOLS", ""},
  {setting_id::remote_connect_timeout, kind::duration, "remote",
   "connect-timeout", "CMDBUS_REMOTE_CONNECT_TIMEOUT",
   "--remote-connect-timeout"},
  {setting_id::remote_reconnect_max, kind::duration, "remote", "reconnect-max",
   "CMDBUS_REMOTE_RECONNECT_MAX", "--remote-reconnect-max"},
  {setting_id::remote_heartbeat_interval, kind::duration, "remote",
   "heartbeat-interval", "CMDBUS_REMOTE_HEARTBEAT_INTERVAL",
   "--remote-heartbeat-interval"},
  {setting_id::tls_certificate, kind::string, "tls", "certificate",
   "CMDBUS_TLS_CERTIFICATE", "--tls-certificate"},
  {setting_id::tls_key, kind::string, "tls", "key", "CMDBUS_TLS_KEY",
   "--tls-key"},
  {setting_id::tls_ca_file, kind::string, "tls", "ca-file",
   "CMDBUS_TLS_CA_FILE", "--tls-ca-file"},
  {setting_id::tls_ca_path, kind::string, "tls", "ca-path",
   "CMDBUS_TLS_CA_PATH", "--tls-ca-path"},
  {setting_id::tls_passphrase, kind::string, "tls", "passphrase",
   "CMDBUS_TLS_PASSPHRASE", "--tls-passphrase"},
  {setting_id::admin_listen, kind::string, "admin", "listen", "CMDBUS_ADMIN",
   "--admin"},
};

/// The sections of the file besides the top level ([global]), in order.
inline constexpr std::string_view sections[] = {"worker", "retry", "remote",
                                                "tls",    "admin"};

// -- lookups -----------------------------------------------------------------

/// Returns the setting of `key` in `section` ("" is the top level), or
/// nullptr.
const setting* find_setting(std::string_view section, std::string_view key);

/// Returns the setting of a command-line option taking a value (`--dsn`), or
/// nullptr.
const setting* find_option(std::string_view option);

/// Returns where an entry is, for messages: "at the top level" or
/// "in section [worker]".
std::string section_label(std::string_view section);

/// Returns a hint for an unknown key, with a leading space: the section the
/// key belongs in (" ('concurrency' belongs in section [worker])"), else the
/// closest key of the section (" (did you mean 'concurrency'?)"), else "".
std::string key_hint(std::string_view section, std::string_view key);

} // namespace cmdbus::config::detail
