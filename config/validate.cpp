// The rules a worker_config must meet, each checked on its own so that one
// run reports every problem.

#include <cctype>
#include <set>
#include <stdexcept>

#include "cmdbus/config/values.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::config {

namespace {

// The [remote] and [tls] rules. The TLS set is checked whether or not
// remote pools are configured: a half-configured set is a mistake either
// way.
template <class Report>
void validate_remote(const worker_config& cfg, Report& report) {
  using namespace detail;
  using std::chrono::milliseconds;
  std::set<std::string> seen;
  for (const auto& pool : cfg.remote.pools) {
    try {
      parse_node_address(pool);
    } catch (const std::invalid_argument& e) {
      report("remote pools: " + db::printable(pool) + ": " + e.what());
      continue;
    }
    if (!seen.insert(pool).second)
      report("remote pools: " + db::printable(pool) + " is listed twice");
  }
  auto in_range = [&](const char* name, milliseconds value, milliseconds lo,
                      milliseconds hi, const char* range) {
    if (value < lo || value > hi)
      report(std::string{name} + " (" + ms_text(value) + ") must be between "
             + range);
  };
  in_range("remote-connect-timeout", cfg.remote.connect_timeout,
           milliseconds{100}, milliseconds{60000}, "100ms and 1min");
  in_range("remote-reconnect-max", cfg.remote.reconnect_max, milliseconds{250},
           milliseconds{600000}, "250ms and 10min");
  in_range("remote-heartbeat-interval", cfg.remote.heartbeat_interval,
           milliseconds{100}, milliseconds{60000}, "100ms and 1min");
  for (auto& problem : validate_tls(cfg.tls))
    report(std::move(problem));
}

// The [retention] rules.
template <class Report>
void validate_retention(const retention_config& r, Report& report) {
  using namespace detail;
  using std::chrono::milliseconds;
  auto age = [&](const char* name,
                 const std::optional<milliseconds>& value) {
    if (value && *value < milliseconds{1000})
      report(std::string{"retention "} + name + " (" + duration_text(*value)
             + ") must be at least 1s");
  };
  age("commands", r.ages.commands);
  age("processes", r.ages.processes);
  age("batches", r.ages.batches);
  age("archive", r.ages.archive);
  if (r.interval < milliseconds{10} || r.interval > milliseconds{86'400'000})
    report("retention interval (" + duration_text(r.interval)
           + ") must be between 10ms and 1d");
  if (r.chunk_size < 1 || r.chunk_size > 100000)
    report("retention chunk-size (" + std::to_string(r.chunk_size)
           + ") must be between 1 and 100000");
  if (r.pause < milliseconds{0} || r.pause > milliseconds{60000})
    report("retention pause (" + duration_text(r.pause)
           + ") must be between 0ms and 1min");
}

} // namespace

std::vector<std::string> validate(const worker_config& cfg) {
  using namespace detail;
  using std::chrono::milliseconds;
  using std::chrono::minutes;
  using std::chrono::seconds;
  std::vector<std::string> problems;
  auto report = [&](std::string text) { problems.push_back(std::move(text)); };
  if (cfg.domains.empty())
    report("no domains configured: set domains in [worker], CMDBUS_DOMAINS "
           "or --domain");
  std::set<std::string> seen;
  for (const auto& domain : cfg.domains) {
    try {
      db::validate_domain(domain);
    } catch (const db::invalid_argument& e) {
      report(std::string{"domains: "} + e.what());
      continue;
    }
    if (!seen.insert(domain).second)
      report("domains: " + db::printable(domain) + " is listed twice");
  }
  if (cfg.concurrency < 1 || cfg.concurrency > 4096)
    report("concurrency (" + std::to_string(cfg.concurrency)
           + ") must be between 1 and 4096");
  if ((cfg.prefetch < 0 && cfg.prefetch != prefetch_auto)
      || cfg.prefetch > 4096)
    report("prefetch (" + std::to_string(cfg.prefetch)
           + ") must be auto or between 0 and 4096");
  if (cfg.visibility_timeout < seconds{1})
    report("visibility-timeout (" + s_text(cfg.visibility_timeout)
           + ") must be at least 1s");
  if (cfg.poll_interval < milliseconds{10}
      || cfg.poll_interval > std::chrono::hours{1})
    report("poll-interval (" + ms_text(cfg.poll_interval)
           + ") must be between 10ms and 1h");
  if (cfg.retry.max_attempts < 1)
    report("max-attempts (" + std::to_string(cfg.retry.max_attempts)
           + ") must be at least 1");
  for (size_t i = 0; i < cfg.retry.backoff_seconds.size(); ++i)
    if (cfg.retry.backoff_seconds[i] < 0)
      report("backoff entry " + std::to_string(i + 1) + " ("
             + std::to_string(cfg.retry.backoff_seconds[i])
             + "s) must not be negative");
  if (!(cfg.retry.jitter >= 0.0 && cfg.retry.jitter <= 1.0))
    report("jitter (" + real_text(cfg.retry.jitter)
           + ") must be between 0 and 1");
  if (cfg.statement_timeout <= milliseconds{0})
    report("statement-timeout (" + ms_text(cfg.statement_timeout)
           + ") must be above 0ms");
  else if (cfg.visibility_timeout >= seconds{1}
           && cfg.statement_timeout >= cfg.visibility_timeout)
    report("statement-timeout (" + ms_text(cfg.statement_timeout)
           + ") must be below visibility-timeout ("
           + s_text(cfg.visibility_timeout) + ")");
  if (cfg.shutdown_timeout < milliseconds{0})
    report("shutdown-timeout (" + ms_text(cfg.shutdown_timeout)
           + ") must not be negative");
  if (cfg.flush_interval < milliseconds{0}
      || cfg.flush_interval > milliseconds{1000})
    report("flush-interval (" + ms_text(cfg.flush_interval)
           + ") must be between 0ms and 1000ms");
  if (cfg.busy_delay < milliseconds{0} || cfg.busy_delay > minutes{1})
    report("busy-delay (" + ms_text(cfg.busy_delay)
           + ") must be between 0ms and 1min");
  auto idle_min = idle_backoff_min_of(cfg);
  auto idle_max = idle_backoff_max_of(cfg);
  if (idle_min < milliseconds{1})
    report("idle-backoff-min (" + ms_text(idle_min) + ") must be at least 1ms");
  else if (idle_max < idle_min || idle_max > std::chrono::hours{1})
    report("idle-backoff-max (" + ms_text(idle_max)
           + ") must be between idle-backoff-min (" + ms_text(idle_min)
           + ") and 1h");
  if (!(cfg.idle_jitter >= 0.0 && cfg.idle_jitter <= 1.0))
    report("idle-jitter (" + real_text(cfg.idle_jitter)
           + ") must be between 0 and 1");
  if (cfg.error_backoff_max < milliseconds{100}
      || cfg.error_backoff_max > minutes{10})
    report("error-backoff-max (" + ms_text(cfg.error_backoff_max)
           + ") must be between 100ms and 10min");
  {
    std::set<std::string> runners;
    for (const auto& r : cfg.tick_runners)
      if (r.empty())
        report("tick runners: a runner name is empty");
      else if (!runners.insert(r).second)
        report("tick runners: " + db::printable(r) + " is listed twice");
  }
  if (cfg.tick_max_duration < milliseconds{0})
    report("tick max-duration (" + ms_text(cfg.tick_max_duration)
           + ") must not be negative");
  if (cfg.tick_runner_max_duration < milliseconds{0})
    report("tick runner-max-duration (" + ms_text(cfg.tick_runner_max_duration)
           + ") must not be negative");
  if (cfg.tick_runner_max_items < 0)
    report("tick runner-max-items (" + std::to_string(cfg.tick_runner_max_items)
           + ") must not be negative");
  if (cfg.tick_shard_count < 0 || cfg.tick_shard_count > 1024)
    report("shard-count (" + std::to_string(cfg.tick_shard_count)
           + ") must be between 0 and 1024");
  else if (cfg.tick_shard_count > 1
           && (cfg.tick_shard_index < 0
               || cfg.tick_shard_index >= cfg.tick_shard_count))
    report("shard-index (" + std::to_string(cfg.tick_shard_index)
           + ") must be between 0 and shard-count - 1 ("
           + std::to_string(cfg.tick_shard_count - 1) + ")");
  else if (cfg.tick_shard_count <= 1 && cfg.tick_shard_index != 0)
    report("shard-index (" + std::to_string(cfg.tick_shard_index)
           + ") needs a shard-count above 1");
  if (!cfg.http.empty()) {
    try {
      parse_http_address(cfg.http);
    } catch (const std::invalid_argument& e) {
      report("http (" + db::printable(cfg.http) + "): " + e.what());
    }
  }
  for (const auto& [domain, dsn] : cfg.domain_dsn)
    if (seen.count(domain) == 0)
      report("domain-dsn: " + db::printable(domain)
             + " is not a served domain (a DSN of [domains.NAME], "
               "CMDBUS_DOMAIN_DSN_NAME or --domain-dsn NAME=DSN must name "
               "one of the domains)");
  for (const auto& [domain, sched] : cfg.scheduling) {
    auto name = db::printable(domain);
    if (seen.count(domain) == 0)
      report("domains: " + name
             + " has priorities or per-type concurrency but is not a served "
               "domain");
    if (sched.fifo_every < 1 || sched.fifo_every > 1000)
      report("fifo-every of domain " + name + " ("
             + std::to_string(sched.fifo_every)
             + ") must be between 1 and 1000");
    for (const auto& [type, cap] : sched.type_concurrency) {
      if (type.empty())
        report("per-type concurrency of domain " + name
               + ": a command type is empty");
      else if (cap < 1 || cap > 4096)
        report("concurrency of type " + db::printable(type) + " in domain "
               + name + " (" + std::to_string(cap)
               + ") must be between 1 and 4096");
    }
  }
  if (!cfg.admin.empty()) {
    try {
      parse_http_address(cfg.admin);
    } catch (const std::invalid_argument& e) {
      report("admin (" + db::printable(cfg.admin) + "): " + e.what());
    }
  }
  for (auto& x : validate_api(cfg.api, "api-"))
    report(std::move(x));
  if (!cfg.api.listen.empty() && !cfg.domain_dsn.empty())
    report("api (" + db::printable(cfg.api.listen)
           + "): the command API of a worker uses its dsn alone, and domain "
             "dsns ([domains.NAME] dsn) put domains elsewhere: run `cmdbus "
             "api` for each database instead");
  if (cfg.tick && !cfg.api.listen.empty())
    report("api (" + db::printable(cfg.api.listen)
           + "): a tick run serves no command API (it ends when its run "
             "does)");
  validate_remote(cfg, report);
  validate_retention(cfg.retention, report);
  for (auto& x : validate_exec(cfg.exec, cfg.domains))
    report(std::move(x));
  return problems;
}

http_address parse_http_address(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    throw std::invalid_argument(
      "expected ADDR:PORT, e.g. 127.0.0.1:9464 or :9464");
  auto host = text.substr(0, colon);
  auto port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string_view::npos)
    throw std::invalid_argument(
      "an IPv6 address needs brackets, e.g. [::1]:9464");
  if (host.empty())
    host = "127.0.0.1";
  for (char c : host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-'
        && c != ':' && c != '_')
      throw std::invalid_argument("the address may hold letters, digits, "
                                  "'.', '-', '_' and ':' only");
  if (port.empty() || port.size() > 5
      || port.find_first_not_of("0123456789") != std::string_view::npos
      || std::stoi(std::string{port}) > 65535)
    throw std::invalid_argument("the port must be a number from 0 to 65535");
  return {std::string{host}, std::stoi(std::string{port})};
}

} // namespace cmdbus::config
