#pragma once

// The tool's text output: aligned tables and name-value lists.

#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace cmdbus::cli {

/// Prints rows as an aligned text table with a header.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

/// Prints `name value` pairs with the values aligned.
void print_fields(std::ostream& out,
                  const std::vector<std::pair<std::string, std::string>>& rows);

} // namespace cmdbus::cli
