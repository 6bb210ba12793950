#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

struct pg_result;

namespace cmdbus::db {

/// Owns a `PGresult`. Row and column indexes are 0-based.
class result {
public:
  explicit result(pg_result* res) noexcept : res_(res) {
    // nop
  }
  result(result&& other) noexcept;
  result& operator=(result&& other) noexcept;
  result(const result&) = delete;
  result& operator=(const result&) = delete;
  ~result();

  /// Returns the number of rows.
  int rows() const noexcept;

  /// Returns the number of columns.
  int columns() const noexcept;

  /// Returns the name of column `col`.
  std::string column_name(int col) const;

  /// Returns the index of the column named `name`; throws if absent.
  int column(std::string_view name) const;

  /// Returns whether the field is SQL NULL.
  bool is_null(int row, int col) const;

  /// Returns the field as text ("" for NULL). The view points into this
  /// result and is valid only while it lives, so it cannot be taken from a
  /// temporary result (use `opt_text` or copy into a `std::string`).
  std::string_view text(int row, int col) const&;
  std::string_view text(int row, int col) const&& = delete;

  /// Returns the field as text, or `std::nullopt` for NULL.
  std::optional<std::string> opt_text(int row, int col) const;

  /// Returns the field as an integer; throws on NULL or non-numeric text.
  int64_t int64(int row, int col) const;

  /// Returns the field as a boolean; throws on NULL.
  bool boolean(int row, int col) const;

  /// Returns the number of rows affected by INSERT/UPDATE/DELETE.
  int64_t affected_rows() const;

private:
  void check(int row, int col) const;
  // Throws unless the field is not NULL.
  void check_not_null(int row, int col) const;
  pg_result* res_;
};

} // namespace cmdbus::db
