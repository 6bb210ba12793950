#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::db {

/// Settings of a connection pool.
struct pool_options {
  /// libpq DSN ("" uses the libpq environment).
  std::string dsn;
  /// Most connections open at once.
  size_t max_size = 8;
  /// Applied to every connection the pool opens.
  connection_options connection;
  /// How long `acquire` waits for a free connection when all are in use.
  std::chrono::milliseconds acquire_timeout{10000};
  /// Reconnect backoff after a failed connection attempt: starts here ...
  std::chrono::milliseconds backoff_initial{100};
  /// ... grows by this factor per consecutive failure ...
  double backoff_multiplier = 2.0;
  /// ... up to this cap; each delay is drawn from [delay/2, delay] (jitter).
  std::chrono::milliseconds backoff_max{30000};
  /// Whether a failed connection attempt logs a warning with the next
  /// attempt's delay (long-running processes); one-shot tools report the
  /// error themselves and turn this off.
  bool log_failures = true;
};

/// A thread-safe pool of connections with reconnect backoff.
///
/// Broken connections are detected when a lease ends (the connection
/// reports a failure) and dropped; the next `acquire` opens a new one. When
/// opening fails, the pool backs off exponentially with jitter: until the
/// next attempt is due, `acquire` fails fast with a clear
/// `errc::connection` error instead of hanging or hammering the server.
class pool {
public:
  explicit pool(pool_options opts);
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  ~pool();

  /// Exclusive use of one pooled connection; returned on destruction.
  class lease {
  public:
    lease(lease&& other) noexcept;
    lease& operator=(lease&&) = delete;
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease();

    /// The leased connection, valid while the lease lives. Not available on
    /// a temporary lease (e.g. `*pool.acquire()`), whose connection would go
    /// back to the pool at the end of the expression, possibly to another
    /// thread, while a reference to it is still around.
    connection& operator*() & noexcept {
      return *conn_;
    }
    connection* operator->() & noexcept {
      return conn_.get();
    }
    connection& operator*() && = delete;
    connection* operator->() && = delete;

  private:
    friend class pool;
    lease(pool* owner, std::unique_ptr<connection> conn) noexcept
      : owner_(owner), conn_(std::move(conn)) {
      // nop
    }
    pool* owner_;
    std::unique_ptr<connection> conn_;
  };

  /// Returns a connection: an idle one, or a new one while below
  /// `max_size`, or waits up to `acquire_timeout` for one to come back.
  /// Throws `error` with `errc::connection` when the database is
  /// unavailable (also while backing off) and `errc::other` ("pool
  /// exhausted") on timeout.
  lease acquire();

  /// Returns the number of open connections (idle and leased).
  size_t size() const;

  /// Returns the number of idle connections.
  size_t idle() const;

  /// Returns the number of consecutive failed connection attempts.
  int consecutive_failures() const;

  /// Returns the redacted target of the DSN (safe to log).
  const std::string& target() const noexcept {
    return target_;
  }

private:
  void give_back(std::unique_ptr<connection> conn) noexcept;
  std::unique_ptr<connection> open_new();

  pool_options opts_;
  std::string target_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<connection>> idle_;
  size_t open_ = 0;
  int failures_ = 0;
  std::chrono::steady_clock::time_point next_attempt_{};
  std::string last_error_;
};

/// Returns the reconnect delay before attempt `failures + 1` after
/// `failures` consecutive failures (without jitter): initial *
/// multiplier^(failures - 1), capped at `max`.
std::chrono::milliseconds
backoff_delay(int failures, std::chrono::milliseconds initial,
              double multiplier, std::chrono::milliseconds max);

/// Returns a delay drawn from [d/2, d] for d = backoff_delay(failures,
/// initial, multiplier, max): the jitter keeps clients that failed together
/// from retrying together.
std::chrono::milliseconds
jittered_backoff(int failures, std::chrono::milliseconds initial,
                 double multiplier, std::chrono::milliseconds max,
                 std::mt19937_64& rng);

} // namespace cmdbus::db
