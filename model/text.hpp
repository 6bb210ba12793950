#pragma once

#include <cstddef>
#include <string_view>

namespace cmdbus {

/// The Levenshtein distance: single-character insertions, deletions and
/// substitutions that turn `a` into `b`. For "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

} // namespace cmdbus
