// The worker's DSNs by domain. Reading the configuration is load()
// (config/load.cpp).

#include "cmdbus/config/worker_config.hpp"

#include <algorithm>

namespace cmdbus::config {

int starting_prefetch(const worker_config& cfg) noexcept {
  return cfg.prefetch == prefetch_auto ? 0 : cfg.prefetch;
}

int max_prefetch(const worker_config& cfg) noexcept {
  // The limit of actors/worker/prefetch_tuner.hpp (config does not see
  // the actors).
  return cfg.prefetch == prefetch_auto ? 256 : cfg.prefetch;
}

bool listens(const worker_config& cfg) noexcept {
  return cfg.use_notify && cfg.pooler != db::pooler_mode::transaction;
}

const std::string& dsn_for(const worker_config& cfg,
                           const std::string& domain) {
  auto i = cfg.domain_dsn.find(domain);
  return i == cfg.domain_dsn.end() ? cfg.dsn : i->second;
}

const domain_scheduling& scheduling_of(const worker_config& cfg,
                                       const std::string& domain) {
  static const domain_scheduling defaults;
  auto i = cfg.scheduling.find(domain);
  return i == cfg.scheduling.end() ? defaults : i->second;
}

std::vector<dsn_group> group_by_dsn(const worker_config& cfg,
                                    const std::vector<std::string>& domains) {
  std::vector<dsn_group> out;
  for (const auto& d : domains) {
    const auto& dsn = dsn_for(cfg, d);
    auto i = std::find_if(out.begin(), out.end(),
                          [&](const dsn_group& g) { return g.dsn == dsn; });
    if (i == out.end())
      out.push_back({dsn, {d}});
    else
      i->domains.push_back(d);
  }
  return out;
}

std::chrono::milliseconds idle_backoff_min_of(const worker_config& cfg) {
  if (cfg.idle_backoff_min)
    return *cfg.idle_backoff_min;
  return std::max(std::chrono::milliseconds{1}, cfg.poll_interval / 4);
}

std::chrono::milliseconds idle_backoff_max_of(const worker_config& cfg) {
  return cfg.idle_backoff_max ? *cfg.idle_backoff_max : cfg.poll_interval;
}

} // namespace cmdbus::config
