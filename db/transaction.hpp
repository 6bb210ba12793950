#pragma once

#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

namespace cmdbus::db {

class connection;
class pool;

/// A transaction on `conn`: BEGIN on construction, ROLLBACK on destruction
/// unless `commit()` succeeded.
class transaction {
public:
  explicit transaction(connection& conn);
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;
  ~transaction();

  /// Commits; throws `error` if the server rejects the commit.
  void commit();

private:
  connection& conn_;
  bool done_ = false;
};

/// Rolls back the transaction open on `conn`, if any, after a failure; a
/// failing ROLLBACK is logged, never thrown, so that the original failure
/// propagates. A broken connection has nothing left to roll back.
void rollback_if_open(connection& conn) noexcept;

namespace detail {

// The non-template part of `in_transaction` (transaction.cpp).
void run_in_transaction(connection& conn,
                        const std::function<void(connection&)>& body);
void run_in_transaction(pool& pool,
                        const std::function<void(connection&)>& body);

// Runs `fn(conn)` through `run_in_transaction(db, ...)` and returns what it
// returned.
template <class Db, class F>
auto run_returning(Db& db, F& fn) -> decltype(fn(std::declval<connection&>())) {
  using result_type = decltype(fn(std::declval<connection&>()));
  if constexpr (std::is_void_v<result_type>) {
    run_in_transaction(db, [&](connection& conn) { fn(conn); });
  } else {
    std::optional<result_type> out;
    run_in_transaction(db, [&](connection& conn) { out.emplace(fn(conn)); });
    return std::move(*out);
  }
}

} // namespace detail

/// Runs `fn(conn)` in a transaction on `conn` and returns what it returns.
///
/// - No transaction open on `conn`: BEGIN, `fn`, COMMIT. When `fn` throws,
///   the transaction is rolled back and `fn`'s exception propagates
///   unchanged. When COMMIT fails (e.g. a deferred constraint), the server
///   has rolled back and the error propagates; `conn` is usable again.
/// - A transaction already open on `conn` (the caller's): `fn` runs as part
///   of it; nothing is committed or rolled back here, and an exception
///   propagates with the caller's transaction as `fn` left it (after a
///   failed statement: aborted, awaiting the caller's ROLLBACK).
/// - A broken connection (`error` with `errc::connection`; `conn.is_open()`
///   is false afterwards): the server has rolled back whatever was not
///   committed, and the error propagates. When it breaks during COMMIT,
///   whether the transaction committed is unknown: write `fn` so that
///   running it again finds out (e.g. by checking the state it changes).
template <class F>
auto in_transaction(connection& conn, F&& fn)
  -> decltype(fn(std::declval<connection&>())) {
  return detail::run_returning(conn, fn);
}

/// Runs `fn(conn)` in a transaction of its own on a connection `conn`
/// leased from `pool` for the call, as `in_transaction(connection&, fn)`
/// does (a leased connection has no transaction open). The lease ends
/// after the commit or the rollback; a connection that broke is not given
/// back to the pool, whose next `acquire` opens a new one.
template <class F>
auto in_transaction(pool& pool, F&& fn)
  -> decltype(fn(std::declval<connection&>())) {
  return detail::run_returning(pool, fn);
}

} // namespace cmdbus::db
