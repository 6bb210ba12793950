#pragma once

// What the libpq wrappers (connection, pipeline, LISTEN) share: errors built
// from libpq's state, checked results and waits on the socket. Internal to
// db/: it includes libpq-fe.h, which the public headers do not.

#include <chrono>
#include <optional>
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

/// How long the server has to answer a statement or a pipeline
/// (connection_options::reply_timeout): the time it ends, and the timeout
/// for messages.
struct reply_limit {
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout;
};

/// The limit of a statement sent now under `timeout` (none: no limit).
std::optional<reply_limit>
limit_from_now(const std::optional<std::chrono::milliseconds>& timeout);

/// The milliseconds left before `limit` (-1: no limit); throws as
/// `abandon` when none are left.
int time_left(PGconn* conn, const std::string& target,
              const std::optional<reply_limit>& limit);

/// Closes the connection of a server that did not answer within `limit`
/// (its socket shut down: the server sees the client gone, libpq reports
/// the connection broken) and throws `error` with `errc::connection`.
[[noreturn]] void abandon(PGconn* conn, const std::string& target,
                          const reply_limit& limit);

/// Waits until PQgetResult will not block on `conn`, at most until `limit`
/// (none: returns at once, PQgetResult then waits as long as it takes).
void await_result(PGconn* conn, const std::string& target,
                  const std::optional<reply_limit>& limit);

/// Sends what libpq holds in its output buffer (non-blocking mode), reading
/// what the server sends meanwhile, at most until `limit` (none: as long as
/// it takes). Throws `error` when the connection breaks.
void flush(PGconn* conn, const std::string& target,
           const std::optional<reply_limit>& limit);

} // namespace cmdbus::db::detail
