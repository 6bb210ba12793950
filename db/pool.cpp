#include "cmdbus/db/pool.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "cmdbus/db/server.hpp"
#include "cmdbus/model/backoff.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::db {

std::chrono::milliseconds
backoff_delay(int failures, std::chrono::milliseconds initial,
              double multiplier, std::chrono::milliseconds max) {
  auto ms = backoff::exponential(failures, static_cast<double>(initial.count()),
                                 multiplier, static_cast<double>(max.count()));
  return std::chrono::milliseconds{static_cast<int64_t>(ms)};
}

std::chrono::milliseconds
jittered_backoff(int failures, std::chrono::milliseconds initial,
                 double multiplier, std::chrono::milliseconds max,
                 std::mt19937_64& rng) {
  auto delay = backoff_delay(failures, initial, multiplier, max);
  auto ms = backoff::jitter(static_cast<double>(delay.count()), 0.5, 1.0, rng);
  return std::chrono::milliseconds{static_cast<int64_t>(ms)};
}

pool::pool(pool_options opts)
  : opts_(std::move(opts)), target_(describe_target(opts_.dsn)) {
  if (opts_.max_size == 0)
    opts_.max_size = 1;
}

pool::~pool() = default;

pool::lease::lease(lease&& other) noexcept
  : owner_(other.owner_), conn_(std::move(other.conn_)) {
  other.owner_ = nullptr;
}

pool::lease::~lease() {
  if (owner_ != nullptr && conn_ != nullptr)
    owner_->give_back(std::move(conn_));
}

size_t pool::size() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return open_;
}

size_t pool::idle() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return idle_.size();
}

int pool::consecutive_failures() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return failures_;
}

std::unique_ptr<connection> pool::open_new() {
  try {
    auto conn = std::make_unique<connection>(
      connection::open(opts_.dsn, opts_.connection));
    std::lock_guard<std::mutex> guard{mtx_};
    if (failures_ > 0)
      log::info("database {} reachable again on {} after {} failed "
                "attempt(s)",
                target_, server_of(*conn), failures_);
    failures_ = 0;
    return conn;
  } catch (const error& e) {
    std::lock_guard<std::mutex> guard{mtx_};
    --open_;
    if (e.code() != errc::connection)
      throw;
    ++failures_;
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    auto wait = jittered_backoff(failures_, opts_.backoff_initial,
                                 opts_.backoff_multiplier, opts_.backoff_max,
                                 rng);
    next_attempt_ = std::chrono::steady_clock::now() + wait;
    last_error_ = e.what();
    if (opts_.log_failures)
      log::warn("database {} unavailable ({} consecutive failure(s)); next "
                "attempt in {} ms",
                target_, failures_, wait.count());
    cv_.notify_one();
    throw;
  } catch (...) {
    std::lock_guard<std::mutex> guard{mtx_};
    --open_;
    cv_.notify_one();
    throw;
  }
}

pool::lease pool::acquire() {
  std::unique_lock<std::mutex> lock{mtx_};
  auto deadline = std::chrono::steady_clock::now() + opts_.acquire_timeout;
  for (;;) {
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      return lease{this, std::move(conn)};
    }
    if (open_ < opts_.max_size) {
      auto now = std::chrono::steady_clock::now();
      if (failures_ > 0 && now < next_attempt_) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          next_attempt_ - now);
        throw error{errc::connection, "",
                    "database " + target_ + " unavailable (" + last_error_
                      + "); next reconnect attempt in "
                      + std::to_string(left.count()) + " ms"};
      }
      ++open_;
      lock.unlock();
      return lease{this, open_new()};
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout
        && idle_.empty() && open_ >= opts_.max_size)
      throw error{errc::other, "",
                  "connection pool for " + target_ + " exhausted: all "
                    + std::to_string(opts_.max_size)
                    + " connections in use for "
                    + std::to_string(opts_.acquire_timeout.count()) + " ms"};
  }
}

void pool::give_back(std::unique_ptr<connection> conn) noexcept {
  bool keep = conn->is_open();
  if (keep && conn->in_transaction()) {
    // A caller left a transaction open (e.g. after an exception): never
    // hand that state to the next caller.
    try {
      conn->exec("ROLLBACK");
    } catch (const std::exception&) {
      keep = false;
    }
  }
  std::lock_guard<std::mutex> guard{mtx_};
  if (keep && conn->is_open()) {
    idle_.push_back(std::move(conn));
  } else {
    --open_;
    log::debug("dropping a broken connection to {}", target_);
  }
  cv_.notify_one();
}

} // namespace cmdbus::db
