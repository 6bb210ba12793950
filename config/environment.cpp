// The environment: one CMDBUS_* variable per setting (see the table in
// config/settings.hpp). Lists are comma-separated, booleans also take 1 and
// 0 in any case, and a variable set to the empty string counts as unset.
// CMDBUS_DOMAIN_DSN_<domain> is read for each served domain (the names are
// not in the table: the domains are known only once the rest is read).

#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/values.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config {

namespace detail {

void apply_settings_env(worker_config& cfg, const env_lookup& getenv) {
  for (const auto& s : settings) {
    if (s.env == nullptr)
      continue;
    auto value = getenv(s.env);
    if (!value || value->empty())
      continue;
    try {
      assign(cfg, s, from_text(s, *value), true);
    } catch (const value_error& e) {
      throw config_error(std::string{"environment variable "} + s.env + " "
                         + e.what());
    }
  }
}

void apply_domain_dsn_env(worker_config& cfg, const env_lookup& getenv,
                          const std::map<std::string, std::string>& keep) {
  for (const auto& domain : cfg.domains) {
    if (keep.count(domain) != 0)
      continue;
    auto name = domain_dsn_env_prefix + domain;
    auto value = getenv(name.c_str());
    if (value && !value->empty())
      cfg.domain_dsn[domain] = *value;
  }
}

} // namespace detail

void apply_env(worker_config& cfg, const env_lookup& getenv) {
  detail::apply_settings_env(cfg, getenv);
  detail::apply_domain_dsn_env(cfg, getenv, {});
}

} // namespace cmdbus::config
