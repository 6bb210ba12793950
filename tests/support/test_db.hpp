#pragma once

#include <string>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::test {

/// Returns the DSN of the test database (environment CMDBUS_TEST_DSN). The
/// first call in a process migrates that database (idempotent).
const std::string& dsn();

/// Returns a new connection to the migrated test database.
db::connection connect();

/// Returns a unique lower-case name `prefix_<random>_<n>` of [a-z0-9_].
std::string unique_name(const std::string& prefix);

/// Returns a random version-4 UUID as text.
std::string new_uuid();

/// Returns `dsn` (key/value or URI) as key/value pairs with `key` set to
/// `value`, whatever it was.
std::string with_setting(const std::string& dsn, const std::string& key,
                         const std::string& value);

/// Returns `dsn` with its database name replaced by `dbname`.
std::string with_dbname(const std::string& dsn, const std::string& dbname);

/// `v` as a quoted value of a libpq DSN ('...' with ' and \ escaped).
std::string quote_value(const std::string& v);

/// A fresh, empty database on the test server, dropped on destruction.
class scratch_database {
public:
  scratch_database();
  scratch_database(const scratch_database&) = delete;
  scratch_database& operator=(const scratch_database&) = delete;
  ~scratch_database();

  /// Returns the database's name.
  const std::string& name() const noexcept {
    return name_;
  }

  /// Returns the DSN of the database.
  const std::string& dsn() const noexcept {
    return dsn_;
  }

private:
  std::string name_;
  std::string dsn_;
};

} // namespace cmdbus::test
