#include "cmdbus/db/error.hpp"

namespace cmdbus::db {

const char* to_string(errc x) noexcept {
  switch (x) {
    case errc::connection: return "connection";
    case errc::unique_violation: return "unique_violation";
    case errc::foreign_key_violation: return "foreign_key_violation";
    case errc::constraint_violation: return "constraint_violation";
    case errc::serialization_failure: return "serialization_failure";
    case errc::deadlock: return "deadlock";
    case errc::statement_timeout: return "statement_timeout";
    case errc::undefined_table: return "undefined_table";
    case errc::undefined_function: return "undefined_function";
    case errc::raise_exception: return "raise_exception";
    case errc::data_exception: return "data_exception";
    case errc::invalid_authorization: return "invalid_authorization";
    case errc::other: return "other";
  }
  return "other";
}

errc classify_sqlstate(const std::string& s) noexcept {
  if (s.size() != 5)
    return errc::other;
  if (s == "23505")
    return errc::unique_violation;
  if (s == "23503")
    return errc::foreign_key_violation;
  if (s == "40001")
    return errc::serialization_failure;
  if (s == "40P01")
    return errc::deadlock;
  if (s == "57014")
    return errc::statement_timeout;
  if (s == "42P01")
    return errc::undefined_table;
  if (s == "42883")
    return errc::undefined_function;
  if (s == "P0001")
    return errc::raise_exception;
  auto cls = s.substr(0, 2);
  if (cls == "23")
    return errc::constraint_violation;
  if (cls == "22")
    return errc::data_exception;
  if (cls == "28")
    return errc::invalid_authorization;
  // Class 08: connection exception; 57P01..57P03: admin shutdown, crash
  // shutdown, cannot connect now.
  if (cls == "08" || s == "57P01" || s == "57P02" || s == "57P03")
    return errc::connection;
  return errc::other;
}

std::string login_failure_sqlstate(const std::string& message) {
  auto has = [&](const char* x) {
    return message.find(x) != std::string::npos;
  };
  if (has("password authentication failed") || has("no password supplied"))
    return "28P01";
  if ((has("FATAL:  role \"") && has("\" does not exist"))
      || has("no pg_hba.conf entry"))
    return "28000";
  if (has("FATAL:  database \"") && has("\" does not exist"))
    return "3D000";
  return {};
}

bool is_login_refused(const error& e) noexcept {
  const auto& s = e.sqlstate();
  return e.code() == errc::connection
         && (s == "28P01" || s == "28000" || s == "3D000");
}

} // namespace cmdbus::db
