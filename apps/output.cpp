#include "apps/output.hpp"

#include <algorithm>

namespace cmdbus::cli {

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c)
    width[c] = header[c].size();
  for (auto& row : rows)
    for (size_t c = 0; c < row.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < width.size(); ++c) {
      std::string cell = c < cells.size() ? cells[c] : "";
      out << cell;
      if (c + 1 < width.size())
        out << std::string(width[c] - cell.size() + 2, ' ');
    }
    out << '\n';
  };
  line(header);
  std::vector<std::string> rule;
  for (auto w : width)
    rule.emplace_back(w, '-');
  line(rule);
  for (auto& row : rows)
    line(row);
}

void print_fields(
  std::ostream& out,
  const std::vector<std::pair<std::string, std::string>>& rows) {
  size_t width = 0;
  for (auto& row : rows)
    width = std::max(width, row.first.size());
  for (auto& [name, value] : rows)
    out << name << std::string(width - name.size() + 2, ' ') << value << '\n';
}

} // namespace cmdbus::cli
