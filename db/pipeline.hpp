#pragma once

// libpq's pipeline mode: many statements in one round trip. Internal to db/;
// callers use `connection::pipeline`.

#include <optional>
#include <string>
#include <vector>

#include <libpq-fe.h>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/libpq.hpp"

namespace cmdbus::db::detail {

/// Sends `statements` on `conn` in one pipeline and returns their results in
/// order; statements with a name must be prepared on `conn` already. Throws
/// the first failure (with its statement index). A pipeline that cannot be
/// left closes the connection (PQfinish) and sets `conn` to null, so that
/// its owner reconnects instead of sending on a session in an unknown state.
/// `target` names the server in error messages. With `limit`, a server
/// that has not answered the whole pipeline by then has its connection
/// closed (detail::abandon).
std::vector<result>
run_pipeline(PGconn*& conn, const std::string& target,
             const std::vector<connection::statement>& statements,
             const std::optional<reply_limit>& limit = std::nullopt);

} // namespace cmdbus::db::detail
