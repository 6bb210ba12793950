// The rules a node_config must meet, each checked on its own so that one
// run reports every problem.

#include "cmdbus/config/node_config.hpp"

#include <algorithm>
#include <stdexcept>

#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::config {

std::vector<std::string> validate(const node_config& cfg) {
  std::vector<std::string> problems;
  if (cfg.domains.empty())
    problems.emplace_back("domains: at least one domain is required");
  for (size_t i = 0; i < cfg.domains.size(); ++i) {
    auto& d = cfg.domains[i];
    try {
      db::validate_domain(d);
    } catch (const std::exception& e) {
      problems.push_back("domain '" + d + "': " + e.what());
    }
    if (std::find(cfg.domains.begin(), cfg.domains.begin() + i, d)
        != cfg.domains.begin() + i)
      problems.push_back("domain '" + d + "' is given twice");
  }
  if (cfg.concurrency < 1 || cfg.concurrency > 4096)
    problems.push_back("concurrency (" + std::to_string(cfg.concurrency)
                       + ") must be 1..4096");
  try {
    parse_http_address(cfg.listen);
  } catch (const std::invalid_argument& e) {
    problems.push_back("listen (" + cfg.listen + "): " + e.what());
  }
  if (!cfg.admin.empty()) {
    try {
      parse_http_address(cfg.admin);
    } catch (const std::invalid_argument& e) {
      problems.push_back("admin (" + cfg.admin + "): " + e.what());
    }
  }
  if (cfg.heartbeat_interval < std::chrono::milliseconds{100}
      || cfg.heartbeat_interval > std::chrono::hours{1})
    problems.push_back("heartbeat ("
                       + std::to_string(cfg.heartbeat_interval.count())
                       + "ms) must be 100ms .. 1h");
  if (cfg.shutdown_timeout < std::chrono::milliseconds::zero())
    problems.push_back("shutdown-timeout ("
                       + std::to_string(cfg.shutdown_timeout.count())
                       + "ms) must not be negative");
  if (cfg.extend_timeout <= std::chrono::milliseconds::zero())
    problems.emplace_back("extend-timeout must be above 0");
  for (auto& p : validate_tls(cfg.tls))
    problems.push_back(p);
  return problems;
}

} // namespace cmdbus::config
