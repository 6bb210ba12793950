// The effective configuration as a config file: what --dump-config prints
// and what a log may show. The DSNs' secrets are masked, and the TLS key's
// passphrase is never printed.

#include <map>
#include <set>

#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/values.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/dsn.hpp"

namespace cmdbus::config {

namespace {

/// The [tls] section, when any of it is set.
std::string tls_section(const tls_config& tls) {
  if (!tls.enabled())
    return {};
  using detail::ini_string;
  std::string out = "[tls]\n";
  auto path = [&](const char* key, const std::string& value) {
    if (!value.empty())
      out += std::string{key} + " = " + ini_string(value) + "\n";
  };
  path("certificate", tls.certificate);
  path("key", tls.key);
  path("ca-file", tls.ca_file);
  path("ca-path", tls.ca_path);
  // The passphrase is never shown, not even masked.
  if (!tls.passphrase.empty())
    out += "; passphrase: set (not shown)\n";
  return out;
}

} // namespace

std::string describe(const worker_config& cfg) {
  using namespace detail;
  using std::chrono::milliseconds;
  std::string out;
  out += "dsn = " + ini_string(db::mask_dsn(cfg.dsn)) + "\n";
  out += "pooler = " + ini_string(db::to_string(cfg.pooler)) + "\n";
  out += "[worker]\n";
  out += "domains = " + ini_list(cfg.domains) + "\n";
  out += "concurrency = " + std::to_string(cfg.concurrency) + "\n";
  out += "prefetch = "
         + (cfg.prefetch == prefetch_auto ? std::string{"auto"}
                                          : std::to_string(cfg.prefetch))
         + "\n";
  out += "visibility-timeout = "
         + duration_text(
           std::chrono::duration_cast<milliseconds>(cfg.visibility_timeout))
         + "\n";
  out += "poll-interval = " + duration_text(cfg.poll_interval) + "\n";
  out += std::string{"use-notify = "} + (cfg.use_notify ? "true" : "false")
         + "\n";
  out += std::string{"deferred-claims = "}
         + (cfg.deferred_claims ? "true" : "false") + "\n";
  out += "statement-timeout = " + duration_text(cfg.statement_timeout) + "\n";
  out += "shutdown-timeout = " + duration_text(cfg.shutdown_timeout) + "\n";
  out += "flush-interval = " + duration_text(cfg.flush_interval) + "\n";
  if (!cfg.http.empty())
    out += "http = " + ini_string(cfg.http) + "\n";
  out += std::string{"tick = "} + (cfg.tick ? "true" : "false") + "\n";
  out += "busy-delay = " + duration_text(cfg.busy_delay) + "\n";
  out += "idle-backoff-min = " + duration_text(idle_backoff_min_of(cfg)) + "\n";
  out += "idle-backoff-max = " + duration_text(idle_backoff_max_of(cfg)) + "\n";
  out += "idle-jitter = " + real_text(cfg.idle_jitter) + "\n";
  out += "error-backoff-max = " + duration_text(cfg.error_backoff_max) + "\n";
  out += "[tick]\n";
  if (!cfg.tick_runners.empty())
    out += "runners = " + ini_list(cfg.tick_runners) + "\n";
  out += "max-duration = " + duration_text(cfg.tick_max_duration) + "\n";
  out += "runner-max-duration = " + duration_text(cfg.tick_runner_max_duration)
         + "\n";
  out += "runner-max-items = " + std::to_string(cfg.tick_runner_max_items)
         + "\n";
  out += "shard-index = " + std::to_string(cfg.tick_shard_index) + "\n";
  out += "shard-count = " + std::to_string(cfg.tick_shard_count) + "\n";
  out += "[retry]\n";
  out += "max-attempts = " + std::to_string(cfg.retry.max_attempts) + "\n";
  out += "backoff = [";
  for (size_t i = 0; i < cfg.retry.backoff_seconds.size(); ++i)
    out += (i == 0 ? "" : ", ") + std::to_string(cfg.retry.backoff_seconds[i]);
  out += "]\n";
  out += "jitter = " + real_text(cfg.retry.jitter) + "\n";
  if (!cfg.remote.pools.empty()) {
    out += "[remote]\n";
    out += "pools = " + ini_list(cfg.remote.pools) + "\n";
    out += "connect-timeout = " + duration_text(cfg.remote.connect_timeout)
           + "\n";
    out += "reconnect-max = " + duration_text(cfg.remote.reconnect_max) + "\n";
    out += "heartbeat-interval = "
           + duration_text(cfg.remote.heartbeat_interval) + "\n";
  }
  out += tls_section(cfg.tls);
  if (cfg.retention.enabled()) {
    out += "[retention]\n";
    auto age = [&](const char* key,
                   const std::optional<std::chrono::milliseconds>& x) {
      if (x)
        out += std::string{key} + " = " + age_text(*x) + "\n";
    };
    age("commands", cfg.retention.ages.commands);
    age("processes", cfg.retention.ages.processes);
    age("batches", cfg.retention.ages.batches);
    age("archive", cfg.retention.ages.archive);
    out += "interval = " + duration_text(cfg.retention.interval) + "\n";
    out += "chunk-size = " + std::to_string(cfg.retention.chunk_size) + "\n";
    out += "pause = " + duration_text(cfg.retention.pause) + "\n";
  }
  const auto& exec = cfg.exec;
  bool any_exec = !exec.programs.empty() || !exec.domain_programs.empty();
  if (any_exec) {
    out += "[exec]\n";
    out += "timeout = " + duration_text(exec.timeout) + "\n";
    out += "kill-grace = " + duration_text(exec.kill_grace) + "\n";
    out += "max-output = " + std::to_string(exec.max_output) + "\n";
    out += "env = " + ini_list(exec.env) + "\n";
  }
  // What --exec and --exec-timeout TYPE=DUR set for every domain is
  // written out for each served one (the file has no such place).
  std::set<std::string> named;
  for (const auto& [domain, dsn] : cfg.domain_dsn)
    named.insert(domain);
  for (const auto& [domain, sched] : cfg.scheduling)
    named.insert(domain);
  for (const auto& [domain, programs] : exec.domain_programs)
    named.insert(domain);
  for (const auto& [domain, types] : exec.domain_type_timeouts)
    named.insert(domain);
  if (!exec.programs.empty() || !exec.type_timeouts.empty())
    named.insert(cfg.domains.begin(), cfg.domains.end());
  for (const auto& domain : named) {
    out += "[domains." + domain + "]\n";
    auto dsn = cfg.domain_dsn.find(domain);
    if (dsn != cfg.domain_dsn.end())
      out += "dsn = " + ini_string(db::mask_dsn(dsn->second)) + "\n";
    auto sched = cfg.scheduling.find(domain);
    std::map<std::string, std::string> types;
    if (sched != cfg.scheduling.end()) {
      out += std::string{"priorities = "}
             + (sched->second.priorities ? "true" : "false") + "\n";
      out += "fifo-every = " + std::to_string(sched->second.fifo_every) + "\n";
      if (!sched->second.schedules)
        out += "schedules = false\n";
      for (const auto& [type, cap] : sched->second.type_concurrency)
        types[type] += "concurrency = " + std::to_string(cap) + "\n";
    }
    auto timeouts = exec.type_timeouts;
    if (auto d = exec.domain_type_timeouts.find(domain);
        d != exec.domain_type_timeouts.end())
      for (const auto& [type, x] : d->second)
        timeouts[type] = x;
    for (const auto& [type, x] : timeouts)
      types[type] += "exec-timeout = " + duration_text(x) + "\n";
    for (const auto& [type, keys] : types)
      out += "[domains." + domain + ".types." + type + "]\n" + keys;
    auto programs = exec_programs_of(exec, domain);
    if (!programs.empty()) {
      out += "[domains." + domain + ".exec]\n";
      for (const auto& [type, command] : programs)
        out += type + " = " + ini_string(command) + "\n";
    }
  }
  if (!cfg.admin.empty())
    out += "[admin]\nlisten = " + ini_string(cfg.admin) + "\n";
  if (!cfg.api.listen.empty()) {
    out += "[api]\nlisten = " + ini_string(cfg.api.listen) + "\n";
    if (!cfg.api.tokens_file.empty())
      out += "tokens-file = " + ini_string(cfg.api.tokens_file) + "\n";
    out += "threads = " + std::to_string(cfg.api.threads) + "\n";
    out += "connections = " + std::to_string(cfg.api.connections) + "\n";
  }
  return out;
}

std::string describe(const node_config& cfg) {
  using namespace detail;
  std::string out = "[node]\n";
  out += "domains = " + ini_list(cfg.domains) + "\n";
  out += "concurrency = " + std::to_string(cfg.concurrency) + "\n";
  out += "listen = " + ini_string(cfg.listen) + "\n";
  out += "name = " + ini_string(cfg.name) + "\n";
  out += "heartbeat = " + duration_text(cfg.heartbeat_interval) + "\n";
  out += "shutdown-timeout = " + duration_text(cfg.shutdown_timeout) + "\n";
  if (!cfg.port_file.empty())
    out += "port-file = " + ini_string(cfg.port_file) + "\n";
  out += tls_section(cfg.tls);
  if (!cfg.admin.empty())
    out += "[admin]\nlisten = " + ini_string(cfg.admin) + "\n";
  return out;
}

} // namespace cmdbus::config
