// The environment: one variable per setting (see the tables,
// config/worker_settings.cpp and config/node_settings.cpp). Lists are
// comma-separated, booleans also take 1 and 0 in any case, and a variable
// set to the empty string counts as unset. The worker's
// CMDBUS_DOMAIN_DSN_<domain> is read for each served domain (not in the
// table: the domains are known only once the rest is read).

#include "cmdbus/config/api_config.hpp"
#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config {

namespace detail {

template <class Config>
void apply_env(Config& cfg, const settings_table<Config>& table,
               const env_lookup& getenv) {
  for (const auto& s : table.settings) {
    if (s.env == nullptr)
      continue;
    auto value = getenv(s.env);
    if (!value || value->empty())
      continue;
    try {
      s.store(cfg, from_text(s.type, *value), true);
    } catch (const value_error& e) {
      throw config_error(std::string{"environment variable "} + s.env + " "
                         + e.what());
    }
  }
}

template void apply_env(worker_config&, const settings_table<worker_config>&,
                        const env_lookup&);
template void apply_env(node_config&, const settings_table<node_config>&,
                        const env_lookup&);
template void apply_env(tls_holder&, const settings_table<tls_holder>&,
                        const env_lookup&);
template void apply_env(api_program_config&,
                        const settings_table<api_program_config>&,
                        const env_lookup&);

} // namespace detail

void apply_env(worker_config& cfg, const env_lookup& getenv) {
  const auto& table = detail::worker_table();
  detail::apply_env(cfg, table, getenv);
  table.late_env(cfg, getenv, worker_config{});
}

void apply_env(node_config& cfg, const env_lookup& getenv) {
  detail::apply_env(cfg, detail::node_table(), getenv);
}

void apply_tls_env(tls_config& tls, const env_lookup& getenv) {
  static const detail::settings_table<detail::tls_holder> table{
    detail::tls_settings<detail::tls_holder>(),
    {},
    {},
    {},
    nullptr,
    nullptr,
    nullptr};
  detail::tls_holder holder{tls};
  detail::apply_env(holder, table, getenv);
  tls = std::move(holder.tls);
}

} // namespace cmdbus::config
