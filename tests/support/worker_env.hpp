#pragma once

// Helpers of the worker integration tests: gates for handlers, a bus with a pool, a worker configuration
// with small timings, and SQL checks of command, audit and queue state.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/worker.hpp"
#include "config/worker_config.hpp"
#include "db/command_bus.hpp"
#include "db/connection.hpp"
#include "db/pool.hpp"
#include "db/queue_name.hpp"
#include "model/json.hpp"
#include "model/types.hpp"
#include "model/uuid.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::test {

using namespace std::chrono_literals;
using opt_str = std::optional<std::string>;
using strings = std::vector<std::string>;

// -- gates -------------------------------------------------------------------

/// A one-shot gate handlers block on; `wait` gives up after `max` so that a
/// failing test never hangs a worker's shutdown forever.
class gate {
public:
  void open() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      open_ = true;
    }
    cv_.notify_all();
  }

  bool wait(std::chrono::milliseconds max = 10s) {
    std::unique_lock<std::mutex> lock{mtx_};
    return cv_.wait_for(lock, max, [this] { return open_; });
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// Runs a function at scope exit (opening gates, stopping workers).
class finally {
public:
  explicit finally(std::function<void()> fn) : fn_(std::move(fn)) {
    // nop
  }
  ~finally() {
    if (fn_)
      fn_();
  }
  finally(const finally&) = delete;
  finally& operator=(const finally&) = delete;

private:
  std::function<void()> fn_;
};

/// Counts handlers running at once and the most seen so far.
class concurrency_probe {
public:
  /// A handler starts; returns how many run now.
  int enter() {
    auto now = ++running_;
    auto seen = max_.load();
    while (now > seen && !max_.compare_exchange_weak(seen, now)) {
      // retry
    }
    return now;
  }
  void leave() {
    --running_;
  }
  int running() const {
    return running_.load();
  }
  int max() const {
    return max_.load();
  }

private:
  std::atomic<int> running_{0};
  std::atomic<int> max_{0};
};

// -- setup -------------------------------------------------------------------

/// A pool, a bus on it and a separate connection for checks.
struct env {
  env() : pool(make_pool_options()), bus(pool), conn(test::connect()) {
    // nop
  }
  static db::pool_options make_pool_options() {
    db::pool_options opts;
    opts.dsn = test::dsn();
    opts.max_size = 4;
    return opts;
  }
  db::pool pool;
  command_bus bus;
  db::connection conn;
};

/// A worker configuration with small timings for `domains`.
inline config::worker_config make_cfg(const strings& domains,
                                      int concurrency = 4) {
  config::worker_config cfg;
  cfg.dsn = test::dsn();
  cfg.domains = domains;
  cfg.concurrency = concurrency;
  cfg.visibility_timeout = 5s;
  cfg.poll_interval = 100ms;
  cfg.use_notify = true;
  cfg.statement_timeout = 2s;
  cfg.shutdown_timeout = 5s;
  cfg.flush_interval = 2ms;
  cfg.retry.max_attempts = 3;
  cfg.retry.backoff_seconds = {0};
  cfg.retry.jitter = 0.0;
  return cfg;
}

/// Stops `w` (if running) within `timeout`.
inline void stop_worker(worker& w, std::chrono::milliseconds timeout = 10s) {
  if (w.is_running())
    w.stop(timeout).get();
}

inline send_request make_req(const std::string& domain, const std::string& type,
                             const std::string& data = "{}") {
  send_request req;
  req.domain = domain;
  req.command_type = type;
  req.command_id = uuid::random();
  req.data = json::parse(data);
  return req;
}

inline std::string queue_of(const std::string& domain) {
  return db::command_queue(domain);
}

// -- state checks (SQL) ------------------------------------------------------

/// Returns the first column of the first row as text (nullopt for NULL or
/// no row).
template <class... Ts>
inline opt_str scalar(db::connection& c, const std::string& sql,
                      const Ts&... xs) {
  auto r = c.query(sql, xs...);
  if (r.rows() == 0 || r.is_null(0, 0))
    return std::nullopt;
  return std::string{r.text(0, 0)};
}

/// Returns a column of the command row as text.
inline opt_str column(db::connection& c, const std::string& domain,
                      const uuid& id, const std::string& col) {
  return scalar(c,
                "SELECT " + col
                    + "::text FROM commandbus.command WHERE domain = $1 AND "
                      "command_id = $2::uuid",
                domain, id.to_string());
}

inline opt_str status_of(db::connection& c, const std::string& domain,
                         const uuid& id) {
  return column(c, domain, id, "status");
}

inline int attempts_of(db::connection& c, const std::string& domain,
                       const uuid& id) {
  auto x = column(c, domain, id, "attempts");
  return x ? std::stoi(*x) : -1;
}

inline bool has_status(db::connection& c, const std::string& domain,
                       const uuid& id, const std::string& status) {
  return status_of(c, domain, id) == opt_str{status};
}

inline bool all_have_status(db::connection& c, const std::string& domain,
                            const std::vector<uuid>& ids,
                            const std::string& status) {
  for (auto& id : ids)
    if (!has_status(c, domain, id, status))
      return false;
  return true;
}

/// The audit event types of a command, in order (ts, audit_id).
inline strings events(db::connection& c, const std::string& domain,
                      const uuid& id) {
  auto r = c.query("SELECT event_type FROM commandbus.audit WHERE domain = $1 "
                   "AND command_id = $2::uuid ORDER BY ts, audit_id",
                   domain, id.to_string());
  strings out;
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.text(i, 0));
  return out;
}

/// `details_json #>> path` of the `nth` audit event of type `event`.
inline opt_str audit_detail(db::connection& c, const std::string& domain,
                            const uuid& id, const std::string& event,
                            const std::string& path, int nth = 0) {
  return scalar(c,
                "SELECT details_json #>> $4::text[] FROM commandbus.audit "
                "WHERE domain = $1 AND command_id = $2::uuid AND event_type = "
                "$3 ORDER BY ts, audit_id LIMIT 1 OFFSET $5",
                domain, id.to_string(), event, path, nth);
}

inline int64_t count_events(db::connection& c, const std::string& domain,
                            const uuid& id, const std::string& event) {
  return c
      .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1 AND "
             "command_id = $2::uuid AND event_type = $3",
             domain, id.to_string(), event)
      .int64(0, 0);
}

/// Rows of pgmq.q_<queue> ("q") or pgmq.a_<queue> ("a").
inline int64_t table_rows(db::connection& c, const std::string& prefix,
                          const std::string& queue) {
  db::validate_queue_name(queue);
  return c.exec("SELECT count(*) FROM pgmq." + prefix + "_" + queue)
      .int64(0, 0);
}

inline int64_t queue_rows(db::connection& c, const std::string& queue) {
  return table_rows(c, "q", queue);
}

inline int64_t archive_rows(db::connection& c, const std::string& queue) {
  return table_rows(c, "a", queue);
}

inline bool archived(db::connection& c, const std::string& queue,
                     int64_t msg_id) {
  db::validate_queue_name(queue);
  return c.query("SELECT count(*) FROM pgmq.a_" + queue + " WHERE msg_id = $1",
                 static_cast<long long>(msg_id))
             .int64(0, 0)
         == 1;
}

/// The messages of a (reply) queue as JSON text, oldest first.
inline strings messages(db::connection& c, const std::string& queue) {
  db::validate_queue_name(queue);
  auto r =
      c.exec("SELECT message::text FROM pgmq.q_" + queue + " ORDER BY msg_id");
  strings out;
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.text(i, 0));
  return out;
}

/// `text::jsonb #>> path` ("{a,b}"), nullopt for a missing key / JSON null.
inline opt_str jget(db::connection& c, const std::string& text,
                    const std::string& path) {
  return scalar(c, "SELECT $1::jsonb #>> $2::text[]", text, path);
}

/// Whether `text::jsonb #> path` equals `expected::jsonb`.
inline bool jeq(db::connection& c, const std::string& text,
                const std::string& path, const std::string& expected) {
  return scalar(c, "SELECT (($1::jsonb #> $2::text[]) = $3::jsonb)::text", text,
                path, expected)
         == opt_str{"true"};
}

/// Whether the JSON object `text` has the top-level key `key`.
inline bool jhas(db::connection& c, const std::string& text,
                 const std::string& key) {
  return scalar(c, "SELECT ($1::jsonb ? $2)::text", text, key)
         == opt_str{"true"};
}

/// Whether the message `msg_id` of `queue` has vt > now() + `interval`.
inline bool vt_beyond(db::connection& c, const std::string& queue,
                      int64_t msg_id, const std::string& interval) {
  db::validate_queue_name(queue);
  return scalar(c,
                "SELECT (vt > now() + $2::interval)::text FROM pgmq.q_" + queue
                    + " WHERE msg_id = $1",
                static_cast<long long>(msg_id), interval)
         == opt_str{"true"};
}

inline json obj(const std::string& text) {
  return json::parse(text);
}

} // namespace cmdbus::test
