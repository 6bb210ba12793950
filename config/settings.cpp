#include "cmdbus/config/settings.hpp"

#include <algorithm>
#include <vector>

#include "cmdbus/model/text.hpp"

namespace cmdbus::config::detail {

// -- lookups -----------------------------------------------------------------

const setting* find_setting(std::string_view section, std::string_view key) {
  for (const auto& s : settings)
    if (s.section == section && s.key == key)
      return &s;
  return nullptr;
}

const setting* find_option(std::string_view option) {
  for (const auto& s : settings)
    if (!s.option.empty() && s.option == option)
      return &s;
  return nullptr;
}

std::string section_label(std::string_view section) {
  return section.empty() ? std::string{"at the top level"}
                         : "in section [" + std::string{section} + "]";
}

std::string key_hint(std::string_view section, std::string_view key) {
  auto dashed = std::string{key};
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  for (const auto& s : settings)
    if (s.key == dashed && s.section != section)
      return " ('" + dashed + "' belongs " + section_label(s.section) + ")";
  const setting* best = nullptr;
  size_t best_distance = 3;
  for (const auto& s : settings) {
    if (s.section != section)
      continue;
    auto d = edit_distance(dashed, s.key);
    if (d < best_distance) {
      best = &s;
      best_distance = d;
    }
  }
  if (best != nullptr)
    return " (did you mean '" + std::string{best->key} + "'?)";
  return {};
}

} // namespace cmdbus::config::detail
