#pragma once

// What a connection pooler (PgBouncer, ...) between cmdbus and PostgreSQL
// keeps of a client's session, and what cmdbus does about it
// (docs/operations.md, "Connection poolers"). No libpq includes.

#include <optional>
#include <string_view>

namespace cmdbus::db {

/// The pooling mode of whatever sits between a connection and the server.
enum class pooler_mode {
  /// No pooler: every connection is a server session of its own.
  none,
  /// A session pooler: a server session is the client's from login to
  /// logout, so everything works as without a pooler.
  session,
  /// A transaction pooler: a client holds a server session only for the
  /// length of one transaction (or one statement outside a transaction
  /// block), so nothing may outlive a transaction: no named prepared
  /// statements, no LISTEN, no session settings (statement_timeout).
  transaction,
};

/// "none", "session" or "transaction".
constexpr const char* to_string(pooler_mode x) noexcept {
  switch (x) {
    case pooler_mode::session: return "session";
    case pooler_mode::transaction: return "transaction";
    case pooler_mode::none: break;
  }
  return "none";
}

/// Parses "none", "session" or "transaction"; none for anything else.
constexpr std::optional<pooler_mode> parse_pooler(std::string_view text) {
  if (text == "none")
    return pooler_mode::none;
  if (text == "session")
    return pooler_mode::session;
  if (text == "transaction")
    return pooler_mode::transaction;
  return std::nullopt;
}

} // namespace cmdbus::db
