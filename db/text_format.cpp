#include "cmdbus/db/text_format.hpp"

namespace cmdbus::db {

namespace {

std::string quote_array_element(const std::string& x) {
  std::string out = "\"";
  for (char c : x) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

// Renders "{x0,x1,...}" with `render(x)` for each element.
template <class T, class F>
std::string braced(const std::vector<T>& xs, F render) {
  std::string out = "{";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0)
      out += ',';
    out += render(xs[i]);
  }
  out += '}';
  return out;
}

} // namespace

// -- array literals ----------------------------------------------------------

std::string array_literal(const std::vector<std::string>& xs) {
  return braced(xs, quote_array_element);
}

std::string array_literal(const std::vector<std::optional<std::string>>& xs) {
  return braced(xs, [](const std::optional<std::string>& x) {
    return x ? quote_array_element(*x) : std::string{"NULL"};
  });
}

std::string array_literal(const std::vector<int64_t>& xs) {
  return braced(xs, [](int64_t x) { return std::to_string(x); });
}

// -- COPY --------------------------------------------------------------------

void append_copy_field(std::string& row, std::string_view field) {
  // Runs without a character to escape are appended whole.
  size_t run = 0;
  for (size_t i = 0; i < field.size(); ++i) {
    const char* escaped = nullptr;
    switch (field[i]) {
      case '\\': escaped = "\\\\"; break;
      case '\t': escaped = "\\t"; break;
      case '\n': escaped = "\\n"; break;
      case '\r': escaped = "\\r"; break;
      default: continue;
    }
    row.append(field.data() + run, i - run).append(escaped);
    run = i + 1;
  }
  row.append(field.data() + run, field.size() - run);
}

} // namespace cmdbus::db
