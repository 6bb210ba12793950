#pragma once

// The database connection of one actor (or of the listener thread), with
// the bookkeeping every such owner needs when the database goes away:
// reconnecting with a capped, jittered backoff, and logging the first
// failure, a reminder while it lasts, and the recovery, each once (never a
// line per message). No CAF headers.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "cmdbus/db/connection.hpp"

namespace cmdbus {
struct domain_health_counters;
} // namespace cmdbus

namespace cmdbus::actors {

/// Returns whether `e` says that the database could not be reached or did
/// not answer in time (a lost connection, a restart, a statement timeout),
/// as opposed to an answer that refused the statement.
bool is_unavailable(const std::exception& e) noexcept;

/// Returns the current time: steady_clock's, or an actor's clock (which a
/// deterministic test moves by hand).
using now_fn = std::function<std::chrono::steady_clock::time_point()>;

/// Consecutive failures of one database client and what follows from them.
class outage_tracker {
public:
  /// `who` names the client in log lines ("completion for payments").
  outage_tracker(std::string who, std::chrono::milliseconds max_backoff,
                 now_fn now = {});

  /// Records a failed round trip: logs the first failure of an outage
  /// (warning) and a reminder once a minute while it lasts; returns the
  /// delay before the next attempt (100 ms doubling up to the cap, drawn
  /// from [delay/2, delay]). `server` ("host:port", may be empty) is the
  /// server the client was using, for the log line.
  std::chrono::milliseconds failed(const std::exception& e,
                                   std::string_view server = {});

  /// Records a successful round trip; logs the recovery once after
  /// failures, with `server` ("host:port", may be empty): after a
  /// failover, the new primary.
  void succeeded(std::string_view server = {});

  /// Returns whether the last round trip failed.
  bool failing() const noexcept {
    return failures_ > 0;
  }

  /// Returns the consecutive failures so far.
  int failures() const noexcept {
    return failures_;
  }

  /// Returns when the next attempt is due (now when not failing).
  std::chrono::steady_clock::time_point retry_at() const noexcept {
    return retry_at_;
  }

  /// Returns whether an attempt made now would come before the backoff
  /// ended.
  bool backing_off() const noexcept;

  /// Returns how long until the next attempt is due, on this tracker's
  /// clock (zero when it is due now).
  std::chrono::milliseconds retry_in() const;

  /// Returns the name used in log lines.
  const std::string& who() const noexcept {
    return who_;
  }

private:
  std::string who_;
  std::chrono::milliseconds max_backoff_;
  int failures_ = 0;
  std::chrono::steady_clock::time_point since_;
  std::chrono::steady_clock::time_point reminded_;
  std::chrono::steady_clock::time_point retry_at_;
  now_fn now_;
  std::mt19937_64 rng_{std::random_device{}()};
};

/// Where and how an actor (or the listener thread) connects.
struct session_options {
  std::string dsn;
  /// Server-side statement timeout; unset keeps the server default (the
  /// listener, which only waits for notifications).
  std::optional<std::chrono::milliseconds> statement_timeout
    = std::chrono::milliseconds{25000};
  /// Upper bound for establishing the connection.
  std::chrono::seconds connect_timeout{10};
  /// Shown in pg_stat_activity.
  std::string application_name = "cmdbus-worker";
  /// Longest backoff between attempts.
  std::chrono::milliseconds max_backoff{2000};
  /// The connection pooler in front of the database.
  db::pooler_mode pooler = db::pooler_mode::none;
};

/// A connection opened on demand, dropped when broken, with an
/// outage_tracker. Not thread-safe: one owner.
class db_session {
public:
  /// `errors` (may be null) counts the failed round trips: the owner's
  /// figure in its domain's metrics.
  db_session(std::string who, session_options opts,
             std::shared_ptr<std::atomic<int64_t>> errors, now_fn now = {});

  /// Returns the connection, opening it first when missing or broken
  /// (logged with the server reached, "host:port": at info level when it
  /// is another server than before, as after a failover). Throws db::error
  /// when the database cannot be reached.
  db::connection& get();

  /// Records a failed round trip (see outage_tracker::failed); drops the
  /// connection when it is broken and counts a database error.
  std::chrono::milliseconds failed(const std::exception& e);

  db_session(const db_session&) = delete;
  db_session& operator=(const db_session&) = delete;
  ~db_session();

  /// Reports this session's outages to its domain's health inputs (may be
  /// null): one failing session while an outage lasts.
  void report_outages_to(std::shared_ptr<domain_health_counters> health) {
    health_ = std::move(health);
  }

  /// Records a successful round trip.
  void succeeded() {
    outage_.succeeded(server_);
    if (reported_)
      end_reported_outage();
  }

  /// Closes the connection.
  void close() noexcept {
    conn_.reset();
  }

  const outage_tracker& outage() const noexcept {
    return outage_;
  }

  /// Returns the name used in log lines.
  const std::string& who() const noexcept {
    return outage_.who();
  }

private:
  session_options opts_;
  std::shared_ptr<std::atomic<int64_t>> errors_;
  std::unique_ptr<db::connection> conn_;
  /// The server of the last connection opened ("host:port"; empty before
  /// the first).
  std::string server_;
  outage_tracker outage_;
  std::shared_ptr<domain_health_counters> health_;
  /// Whether health_ counts this session as failing.
  bool reported_ = false;

  void end_reported_outage() noexcept;
};

} // namespace cmdbus::actors
