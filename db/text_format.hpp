#pragma once

// Values in PostgreSQL's text format: statement parameters, array literals
// for array parameters, and fields of COPY's text format.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cmdbus::db {

/// A statement parameter in PostgreSQL text format; `std::nullopt` is NULL.
using param = std::optional<std::string>;

// -- parameter conversion ----------------------------------------------------

inline param to_param(std::nullopt_t) {
  return std::nullopt;
}
inline param to_param(const std::string& x) {
  return x;
}
inline param to_param(std::string&& x) {
  return std::move(x);
}
inline param to_param(std::string_view x) {
  return std::string{x};
}
inline param to_param(const char* x) {
  return std::string{x};
}
inline param to_param(bool x) {
  return std::string{x ? "t" : "f"};
}
inline param to_param(int x) {
  return std::to_string(x);
}
inline param to_param(long x) {
  return std::to_string(x);
}
inline param to_param(long long x) {
  return std::to_string(x);
}
inline param to_param(unsigned x) {
  return std::to_string(x);
}
inline param to_param(unsigned long x) {
  return std::to_string(x);
}
inline param to_param(unsigned long long x) {
  return std::to_string(x);
}
inline param to_param(const param& x) {
  return x;
}

template <class T>
param to_param(const std::optional<T>& x) {
  if (!x)
    return std::nullopt;
  return to_param(*x);
}

// -- array literals ----------------------------------------------------------

/// Renders `xs` as a PostgreSQL array literal (`{"a","b"}`) for a text
/// parameter cast to `text[]`, `jsonb[]`, `bigint[]`, ...
std::string array_literal(const std::vector<std::string>& xs);

/// Renders `xs` as an array literal with NULL elements for `std::nullopt`.
std::string array_literal(const std::vector<std::optional<std::string>>& xs);

/// Renders integers as a PostgreSQL array literal (`{1,2,3}`).
std::string array_literal(const std::vector<int64_t>& xs);

// -- COPY --------------------------------------------------------------------

/// Appends `field` to `row` in COPY's text format: backslash, tab, newline
/// and carriage return escaped; the caller adds the tab between fields and
/// the newline after the row. SQL NULL is written as `\N` by the caller.
void append_copy_field(std::string& row, std::string_view field);

} // namespace cmdbus::db
