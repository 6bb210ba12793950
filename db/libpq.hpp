#pragma once

// What the libpq wrappers (connection, pipeline, LISTEN) share: errors built
// from libpq's state, checked results and waits on the socket. Internal to
// db/: it includes libpq-fe.h, which the public headers do not.

#include <string>
#include <vector>

#include <libpq-fe.h>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/result.hpp"
#include "cmdbus/db/text_format.hpp"

namespace cmdbus::db::detail {

/// Returns `s` without trailing newlines, spaces and tabs (libpq ends its
/// messages with a newline).
std::string trim(std::string s);

/// Builds an error from a failed result, or from the connection state when
/// `res` is null.
error make_error(PGconn* conn, const PGresult* res);

/// Wraps `res` after checking its status; clears it and throws `error` on
/// failure.
result checked(PGconn* conn, PGresult* res);

/// Returns the C strings libpq takes for `params` (null for SQL NULL),
/// pointing into `params`.
std::vector<const char*> param_values(const std::vector<param>& params);

/// Waits until the socket of `conn` is ready for `events` (POLLIN/POLLOUT)
/// or `timeout_ms` passes (-1: forever). Returns the ready events, 0 on
/// timeout; throws on a broken socket.
short wait_socket(PGconn* conn, short events, int timeout_ms);

} // namespace cmdbus::db::detail
