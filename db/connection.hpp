#pragma once

// A libpq connection: statements with parameters, prepared statements, COPY,
// pipelines and LISTEN. Includes what its users need besides: results
// (db/result.hpp), parameters (db/text_format.hpp) and transactions
// (db/transaction.hpp).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/db/dsn.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pooler.hpp"
#include "cmdbus/db/result.hpp"
#include "cmdbus/db/text_format.hpp"
#include "cmdbus/db/transaction.hpp"

struct pg_conn;

namespace cmdbus::db {

// -- connection --------------------------------------------------------------

/// Settings applied to every new connection.
struct connection_options {
  /// Shown in pg_stat_activity, unless the DSN sets its own.
  std::string application_name = "cmdbus";
  /// Server-side statement timeout; unset keeps the server default. Not
  /// set behind a transaction pooler (a session setting would stay on the
  /// pooler's server session, for whichever client comes next): there the
  /// server's own setting applies (see check_pooled_statement_timeout).
  std::optional<std::chrono::milliseconds> statement_timeout;
  /// Upper bound for establishing the connection.
  std::chrono::seconds connect_timeout{10};
  /// Client-side bound on the wait for the answer to one statement (or one
  /// pipeline), for the server that cannot answer at all: a backend that
  /// is stopped (SIGSTOP, a frozen VM) runs no statement_timeout, and a
  /// network that holds the packets is noticed by TCP only after minutes.
  /// When it passes, the connection is closed and the call throws `error`
  /// with `errc::connection` (whether the statement took effect is unknown,
  /// as after any lost connection; the server rolls back what it had not
  /// committed). Set it above statement_timeout, so that a statement that
  /// merely runs long still ends with the server's own error. A COPY has
  /// it for each of its steps (its start, each slice of its data, its
  /// end); wait_for_notifications keeps its own timeout. Unset: no bound.
  std::optional<std::chrono::milliseconds> reply_timeout;
  /// The pooler between this connection and the server. Behind a
  /// transaction pooler, the connection keeps nothing in the session:
  /// prepared statements run unnamed, LISTEN and set_statement_timeout
  /// are refused, statement_timeout is not set.
  pooler_mode pooler = pooler_mode::none;
};

/// An owned libpq connection. Not thread-safe: one owner at a time.
/// All statements with values use parameters (extended protocol).
class connection {
public:
  /// Connects to `dsn` (a libpq key/value string or URI; "" uses the libpq
  /// environment: PGHOST, PGPORT, ...). Throws `error` with
  /// `errc::connection` when the server is unreachable or refuses the login,
  /// and `invalid_argument` for a malformed DSN (never echoing it).
  static connection open(const std::string& dsn,
                         const connection_options& opts = {});

  connection(connection&&) noexcept;
  connection& operator=(connection&&) noexcept;
  ~connection();

  /// Runs one or more statements without parameters (simple protocol).
  /// Returns the result of the last statement.
  result exec(std::string_view sql);

  /// Runs one statement with text parameters ($1, $2, ...).
  result exec(const std::string& sql, const std::vector<param>& params);

  /// Runs a named prepared statement: prepares `sql` under `name` on first
  /// use on this connection (plans are cached server-side), then executes
  /// it. One name must always denote the same SQL. Behind a transaction
  /// pooler, runs `sql` unnamed instead (like `exec`): the next statement
  /// may reach another server session, one without the prepared name.
  result exec_prepared(const std::string& name, const std::string& sql,
                       const std::vector<param>& params);

  /// Runs one statement, converting each argument with `to_param`.
  template <class... Ts>
  result query(const std::string& sql, const Ts&... xs) {
    return exec(sql, std::vector<param>{to_param(xs)...});
  }

  /// Runs `sql`, a `COPY ... FROM STDIN` in text format, sending `data`
  /// (rows ending in a newline, fields as `append_copy_field` writes them)
  /// and returns the number of rows copied. Throws `error` like `exec`, and
  /// `invalid_argument` for a statement that is not COPY FROM STDIN; the
  /// connection stays usable afterwards (inside a transaction block, the
  /// transaction is failed and awaits ROLLBACK).
  int64_t copy_in(const std::string& sql, std::string_view data);

  /// Sets the server-side statement timeout of this session (0 disables).
  /// Throws `invalid_argument` behind a transaction pooler, where the
  /// setting would outlive the transaction on a session others share.
  void set_statement_timeout(std::chrono::milliseconds timeout);

  /// Returns the pooler this connection was opened for.
  pooler_mode pooler() const noexcept;

  /// Returns and clears the NOTICE/WARNING messages received so far
  /// (the most recent 100 are kept).
  std::vector<std::string> take_notices();

  /// Returns whether the connection is usable.
  bool is_open() const noexcept;

  /// Returns the redacted target ("user@host:port/dbname").
  const std::string& target() const noexcept;

  /// Returns the backend process id.
  int backend_pid() const noexcept;

  /// Returns the raw handle for libpq features not wrapped here.
  pg_conn* native() noexcept;

  /// Returns whether the session is inside a transaction block (also when
  /// the transaction failed and awaits ROLLBACK).
  bool in_transaction() const noexcept;

  // -- pipeline mode ---------------------------------------------------------

  /// One statement of a pipeline. With a `name`, it runs as a prepared
  /// statement (prepared before the pipeline on first use), except behind
  /// a transaction pooler, where it runs unnamed.
  struct statement {
    std::string sql;
    std::vector<param> params;
    std::string name = {};
  };

  /// Sends all `statements` in one round trip (libpq pipeline mode) and
  /// returns their results in order. When one fails, the server skips the
  /// rest up to the end of the pipeline and this throws the first error,
  /// with `error::statement_index` telling which statement failed.
  /// Outside a transaction block each statement commits on its own (as
  /// with `exec`); wrap them in BEGIN/COMMIT statements for atomicity.
  std::vector<result> pipeline(const std::vector<statement>& statements);

  // -- LISTEN / NOTIFY -------------------------------------------------------

  /// Subscribes to `channel` (`LISTEN`); the name must be a valid queue-style
  /// identifier (e.g. `pgmq_notify_payments__commands`), it is folded to
  /// lower case like an unquoted identifier. Throws `invalid_argument`
  /// behind a transaction pooler, which hands the session that listens to
  /// other clients after the statement (notifications would be lost).
  void listen(const std::string& channel);

  /// Waits until at least one notification arrives or `timeout` passes and
  /// returns the channels of all notifications received (possibly
  /// repeated), or an empty vector on timeout. Throws `error` with
  /// `errc::connection` when the connection breaks.
  std::vector<std::string>
  wait_for_notifications(std::chrono::milliseconds timeout);

private:
  struct impl;
  explicit connection(std::unique_ptr<impl> ptr);
  std::unique_ptr<impl> impl_;
};

/// Behind a transaction pooler, where connections cannot set their own
/// statement timeout: throws `invalid_argument` (saying what to change)
/// unless the server applies one of at most `wanted` to the sessions
/// `conn` reaches (set for the role or the database, or by the pooler's
/// connect query). Does nothing without a transaction pooler.
void check_pooled_statement_timeout(connection& conn,
                                    std::chrono::milliseconds wanted);

} // namespace cmdbus::db
