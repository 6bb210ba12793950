#include "config/settings.hpp"

#include <algorithm>
#include <vector>

namespace cmdbus::config::detail {

namespace {

/// The Levenshtein distance: single-character insertions, deletions and
/// substitutions that turn `a` into `b`.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min(
        {row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

} // namespace

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
