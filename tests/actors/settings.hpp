#pragma once

// Builds the settings of a domain's actors for the actor tests: a worker
// configuration (values) plus fresh links (metrics, an empty registry
// unless given, the cancel flag).

#include <memory>
#include <string>
#include <utility>

#include "cmdbus/actors/worker/spawn.hpp"

namespace cmdbus::actors::test {

/// Returns the settings of domain `domain` under `cfg`.
inline domain_settings
make_settings(config::worker_config cfg, std::string domain = "d",
              std::shared_ptr<const handler_registry> registry = nullptr) {
  domain_settings s;
  s.domain = std::move(domain);
  s.cfg = std::make_shared<const config::worker_config>(std::move(cfg));
  s.registry = registry ? std::move(registry)
                        : std::make_shared<const handler_registry>();
  s.cancelled = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::string> types;
  for (auto& [d, type] : s.registry->keys())
    if (d == s.domain)
      types.push_back(type);
  s.metrics = std::make_shared<domain_metrics>(s.domain, s.cfg->concurrency,
                                               types);
  return s;
}

/// Changes the configuration `settings` refer to (a copy: other holders of
/// the old one keep it).
template <class F>
void retune(domain_settings& settings, F f) {
  auto cfg = *settings.cfg;
  f(cfg);
  settings.cfg = std::make_shared<const config::worker_config>(std::move(cfg));
}

} // namespace cmdbus::actors::test
