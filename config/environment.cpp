// The environment: one CMDBUS_* variable per setting (see the table in
// config/settings.hpp). Lists are comma-separated, booleans also take 1 and
// 0 in any case, and a variable set to the empty string counts as unset.

#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/values.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config {

void apply_env(worker_config& cfg, const env_lookup& getenv) {
  using namespace detail;
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

} // namespace cmdbus::config
