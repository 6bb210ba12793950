#include "cmdbus/config/options.hpp"

#include <algorithm>

#include "cmdbus/model/text.hpp"

namespace cmdbus::config {

namespace {

/// The widest label that still has its text beside it.
constexpr size_t max_label = 24;

/// The last column a help line may use.
constexpr size_t line_width = 79;

/// Appends `text` to `out` wrapped between `column` and line_width, the
/// first line continuing `out`'s last line (which is `column` long). A line
/// break in `text` starts a new line.
void wrap(std::string& out, std::string_view text, size_t column) {
  size_t used = column;
  bool line_empty = true;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\n') {
      out += '\n';
      out.append(column, ' ');
      used = column;
      line_empty = true;
      ++i;
      continue;
    }
    if (text[i] == ' ') {
      ++i;
      continue;
    }
    auto end = text.find_first_of(" \n", i);
    if (end == std::string_view::npos)
      end = text.size();
    auto word = text.substr(i, end - i);
    if (!line_empty && used + 1 + word.size() > line_width) {
      out += '\n';
      out.append(column, ' ');
      used = column;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++used;
    }
    out += word;
    used += word.size();
    line_empty = false;
    i = end;
  }
}

} // namespace

std::string option::label() const {
  std::string out;
  if (!short_name.empty())
    out.append(short_name).append(", ");
  out.append(name);
  if (!metavar.empty())
    out.append(" ").append(metavar);
  return out;
}

std::string render_options(const std::vector<option_help>& entries) {
  size_t widest = 0;
  for (const auto& e : entries)
    if (e.label.size() <= max_label)
      widest = std::max(widest, e.label.size());
  auto column = 2 + widest + 2;
  std::string out;
  for (const auto& e : entries) {
    out += "  " + e.label;
    if (e.label.size() <= widest) {
      out.append(column - 2 - e.label.size(), ' ');
    } else {
      out += '\n';
      out.append(column, ' ');
    }
    wrap(out, e.text, column);
    out += '\n';
  }
  return out;
}

std::string render_options(const std::vector<option>& options) {
  std::vector<option_help> entries;
  entries.reserve(options.size());
  for (const auto& o : options)
    entries.push_back({o.label(), std::string{o.help}});
  return render_options(entries);
}

std::string nearest(std::string_view given,
                    const std::vector<std::string>& candidates) {
  // An abbreviation of exactly one candidate ("--oldest") names it.
  std::string prefixed;
  int prefixes = 0;
  for (const auto& c : candidates)
    if (given.size() >= 3 && c.size() > given.size()
        && c.compare(0, given.size(), given) == 0) {
      prefixed = c;
      ++prefixes;
    }
  if (prefixes == 1)
    return prefixed;
  std::string best;
  size_t best_distance = std::max<size_t>(2, given.size() / 3) + 1;
  for (const auto& c : candidates) {
    auto d = edit_distance(given, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view name,
                         const std::vector<std::string>& options) {
  auto near = nearest(name, options);
  return near.empty() ? std::string{} : "; did you mean " + near + "?";
}

} // namespace cmdbus::config
