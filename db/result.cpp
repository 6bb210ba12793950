#include "cmdbus/db/result.hpp"

#include <stdexcept>

#include <libpq-fe.h>

namespace cmdbus::db {

result::result(result&& other) noexcept : res_(other.res_) {
  other.res_ = nullptr;
}

result& result::operator=(result&& other) noexcept {
  if (this != &other) {
    PQclear(res_);
    res_ = other.res_;
    other.res_ = nullptr;
  }
  return *this;
}

result::~result() {
  PQclear(res_);
}

int result::rows() const noexcept {
  return res_ ? PQntuples(res_) : 0;
}

int result::columns() const noexcept {
  return res_ ? PQnfields(res_) : 0;
}

std::string result::column_name(int col) const {
  check(0, col);
  return PQfname(res_, col);
}

int result::column(std::string_view name) const {
  for (int i = 0; i < columns(); ++i)
    if (name == PQfname(res_, i))
      return i;
  throw std::out_of_range("result has no column named " + std::string{name});
}

void result::check(int row, int col) const {
  if (res_ == nullptr || col < 0 || col >= columns() || row < 0
      || (row >= rows() && !(row == 0 && rows() == 0)))
    throw std::out_of_range("result field (" + std::to_string(row) + ", "
                            + std::to_string(col) + ") out of range");
}

void result::check_not_null(int row, int col) const {
  if (is_null(row, col))
    throw std::runtime_error("unexpected NULL in column "
                             + std::string{PQfname(res_, col)});
}

bool result::is_null(int row, int col) const {
  check(row, col);
  return PQgetisnull(res_, row, col) != 0;
}

std::string_view result::text(int row, int col) const& {
  check(row, col);
  return {PQgetvalue(res_, row, col),
          static_cast<size_t>(PQgetlength(res_, row, col))};
}

std::optional<std::string> result::opt_text(int row, int col) const {
  if (is_null(row, col))
    return std::nullopt;
  return std::string{text(row, col)};
}

int64_t result::int64(int row, int col) const {
  check_not_null(row, col);
  std::string s{text(row, col)};
  size_t pos = 0;
  auto value = std::stoll(s, &pos);
  if (pos != s.size())
    throw std::runtime_error("column " + std::string{PQfname(res_, col)}
                             + " is not an integer");
  return value;
}

bool result::boolean(int row, int col) const {
  check_not_null(row, col);
  return text(row, col) == "t";
}

int64_t result::affected_rows() const {
  const char* n = res_ ? PQcmdTuples(res_) : "";
  return *n == '\0' ? 0 : std::stoll(n);
}

} // namespace cmdbus::db
