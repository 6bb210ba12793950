#pragma once

#include <stdexcept>
#include <string>

namespace cmdbus::db {

/// Classifies database failures by SQLSTATE (never by message text).
enum class errc {
  /// The server could not be reached, refused the login, or the connection
  /// broke.
  connection,
  /// SQLSTATE 23505.
  unique_violation,
  /// SQLSTATE 23503.
  foreign_key_violation,
  /// SQLSTATE 23502 / 23514 and other integrity errors (class 23).
  constraint_violation,
  /// SQLSTATE 40001.
  serialization_failure,
  /// SQLSTATE 40P01.
  deadlock,
  /// SQLSTATE 57014 raised by statement_timeout.
  statement_timeout,
  /// SQLSTATE 42P01: e.g. a PGMQ queue that does not exist.
  undefined_table,
  /// SQLSTATE 42883.
  undefined_function,
  /// SQLSTATE P0001: RAISE EXCEPTION in a stored procedure.
  raise_exception,
  /// SQLSTATE class 22 (bad input value).
  data_exception,
  /// SQLSTATE 28xxx (authentication / authorisation at login).
  invalid_authorization,
  /// Anything else.
  other,
};

/// Returns a short, stable name for `x`.
const char* to_string(errc x) noexcept;

/// Maps a five-character SQLSTATE to an `errc`.
errc classify_sqlstate(const std::string& sqlstate) noexcept;

/// Returns the SQLSTATE of a refused login from the message of a failed
/// connection attempt: "28P01" (wrong or missing password), "28000" (unknown
/// role, no pg_hba.conf entry) or "3D000" (no such database); "" for any
/// other failure. libpq reports no SQLSTATE for a failed connection attempt,
/// so this reads the server's message, which is English unless the server
/// sets lc_messages otherwise (then the failure stays a plain connection
/// failure).
std::string login_failure_sqlstate(const std::string& message);

/// A failed database operation. `what()` is the server's primary message
/// (never contains connection secrets).
class error : public std::runtime_error {
public:
  error(errc code, std::string sqlstate, const std::string& message,
        std::string detail = {}, std::string constraint = {})
    : std::runtime_error(message), code_(code), sqlstate_(std::move(sqlstate)),
      detail_(std::move(detail)), constraint_(std::move(constraint)) {
    // nop
  }

  /// Returns the classification of this failure.
  errc code() const noexcept {
    return code_;
  }

  /// Returns the SQLSTATE reported by the server, or "" for client-side errors.
  const std::string& sqlstate() const noexcept {
    return sqlstate_;
  }

  /// Returns the server's DETAIL field ("" when absent).
  const std::string& detail() const noexcept {
    return detail_;
  }

  /// Returns the name of the violated constraint ("" when absent).
  const std::string& constraint() const noexcept {
    return constraint_;
  }

  /// Returns the position of the failing statement within a pipeline, or
  /// -1 outside pipelines.
  int statement_index() const noexcept {
    return statement_index_;
  }

  /// Sets the position reported by `statement_index`.
  void set_statement_index(int index) noexcept {
    statement_index_ = index;
  }

  /// Returns whether retrying on a fresh connection may succeed.
  bool is_transient() const noexcept {
    return code_ == errc::connection || code_ == errc::serialization_failure
           || code_ == errc::deadlock || code_ == errc::statement_timeout;
  }

private:
  errc code_;
  std::string sqlstate_;
  std::string detail_;
  std::string constraint_;
  int statement_index_ = -1;
};

/// Returns whether `e` is a refused login (see `login_failure_sqlstate`).
bool is_login_refused(const error& e) noexcept;

/// Input that is rejected before any SQL runs (e.g. an invalid queue name).
class invalid_argument : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

} // namespace cmdbus::db
