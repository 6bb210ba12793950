// The effective configuration as a config file: what --dump-config prints
// and what a log may show. The DSNs' secrets are masked, and the TLS key's
// passphrase is never printed.

#include "cmdbus/config/values.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/dsn.hpp"

namespace cmdbus::config {

std::string describe(const worker_config& cfg) {
  using namespace detail;
  using std::chrono::milliseconds;
  std::string out;
  out += "dsn = " + ini_string(db::mask_dsn(cfg.dsn)) + "\n";
  out += "[worker]\n";
  out += "domains = [";
  for (size_t i = 0; i < cfg.domains.size(); ++i)
    out += (i == 0 ? "" : ", ") + ini_string(cfg.domains[i]);
  out += "]\n";
  out += "concurrency = " + std::to_string(cfg.concurrency) + "\n";
  out += "prefetch = " + std::to_string(cfg.prefetch) + "\n";
  out += "visibility-timeout = "
         + duration_text(
           std::chrono::duration_cast<milliseconds>(cfg.visibility_timeout))
         + "\n";
  out += "poll-interval = " + duration_text(cfg.poll_interval) + "\n";
  out += std::string{"use-notify = "} + (cfg.use_notify ? "true" : "false")
         + "\n";
  out += "statement-timeout = " + duration_text(cfg.statement_timeout) + "\n";
  out += "shutdown-timeout = " + duration_text(cfg.shutdown_timeout) + "\n";
  out += "flush-interval = " + duration_text(cfg.flush_interval) + "\n";
  if (!cfg.http.empty())
    out += "http = " + ini_string(cfg.http) + "\n";
  out += std::string{"tick = "} + (cfg.tick ? "true" : "false") + "\n";
  out += "[retry]\n";
  out += "max-attempts = " + std::to_string(cfg.retry.max_attempts) + "\n";
  out += "backoff = [";
  for (size_t i = 0; i < cfg.retry.backoff_seconds.size(); ++i)
    out += (i == 0 ? "" : ", ") + std::to_string(cfg.retry.backoff_seconds[i]);
  out += "]\n";
  out += "jitter = " + real_text(cfg.retry.jitter) + "\n";
  if (!cfg.remote.pools.empty()) {
    out += "[remote]\n";
    out += "pools = [";
    for (size_t i = 0; i < cfg.remote.pools.size(); ++i)
      out += (i == 0 ? "" : ", ") + ini_string(cfg.remote.pools[i]);
    out += "]\n";
    out += "connect-timeout = " + duration_text(cfg.remote.connect_timeout)
           + "\n";
    out += "reconnect-max = " + duration_text(cfg.remote.reconnect_max) + "\n";
    out += "heartbeat-interval = "
           + duration_text(cfg.remote.heartbeat_interval) + "\n";
  }
  if (cfg.tls.enabled()) {
    // The passphrase is never shown, not even masked.
    out += "[tls]\n";
    auto path = [&](const char* key, const std::string& value) {
      if (!value.empty())
        out += std::string{key} + " = " + ini_string(value) + "\n";
    };
    path("certificate", cfg.tls.certificate);
    path("key", cfg.tls.key);
    path("ca-file", cfg.tls.ca_file);
    path("ca-path", cfg.tls.ca_path);
    if (!cfg.tls.passphrase.empty())
      out += "; passphrase: set (not shown)\n";
  }
  for (const auto& [domain, dsn] : cfg.domain_dsn) {
    out += "[domains." + domain + "]\n";
    out += "dsn = " + ini_string(db::mask_dsn(dsn)) + "\n";
  }
  if (!cfg.admin.empty())
    out += "[admin]\nlisten = " + ini_string(cfg.admin) + "\n";
  return out;
}

} // namespace cmdbus::config
