#include "cmdbus/actors/worker/db_session.hpp"

#include "cmdbus/actors/ops/health.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/server.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace {

using clock = std::chrono::steady_clock;

/// How often a continuing outage is logged again.
constexpr auto reminder_period = std::chrono::minutes{1};

int64_t millis(clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// " on host:port" for a log line, or nothing.
std::string on(std::string_view server) {
  return server.empty() ? std::string{} : " on " + std::string{server};
}

} // namespace

bool is_unavailable(const std::exception& e) noexcept {
  auto* err = dynamic_cast<const db::error*>(&e);
  return err != nullptr
         && (err->code() == db::errc::connection
             || err->code() == db::errc::statement_timeout);
}

outage_tracker::outage_tracker(std::string who,
                               std::chrono::milliseconds max_backoff,
                               now_fn now)
  : who_(std::move(who)), max_backoff_(max_backoff), now_(std::move(now)) {
  if (!now_)
    now_ = [] { return clock::now(); };
}

std::chrono::milliseconds outage_tracker::failed(const std::exception& e,
                                                 std::string_view server) {
  auto now = now_();
  if (failures_++ == 0) {
    since_ = now;
    reminded_ = now;
    log::from(who_).warn(
      "{} cannot use the database{} ({}); retrying with backoff, "
      "nothing is dropped",
      who_, on(server), log::one_line(e.what()));
  } else if (now - reminded_ >= reminder_period) {
    reminded_ = now;
    log::from(who_).warn(
      "{} still cannot use the database after {} attempts in {} s "
      "({})",
      who_, failures_,
      std::chrono::duration_cast<std::chrono::seconds>(now - since_).count(),
      log::one_line(e.what()));
  } else {
    log::from(who_).debug("{} failed again ({})", who_,
                          log::one_line(e.what()));
  }
  auto delay = db::jittered_backoff(failures_, std::chrono::milliseconds{100},
                                    2.0, max_backoff_, rng_);
  retry_at_ = now + delay;
  return delay;
}

void outage_tracker::succeeded(std::string_view server) {
  if (failures_ == 0)
    return;
  log::from(who_).info(
    "{} uses the database again{} after {} failed attempt(s) in {} ms", who_,
    on(server), failures_, millis(now_() - since_));
  failures_ = 0;
  retry_at_ = {};
}

bool outage_tracker::backing_off() const noexcept {
  return failures_ > 0 && now_() < retry_at_;
}

std::chrono::milliseconds outage_tracker::retry_in() const {
  if (!backing_off())
    return std::chrono::milliseconds{0};
  return std::chrono::ceil<std::chrono::milliseconds>(retry_at_ - now_());
}

db_session::db_session(std::string who, session_options opts,
                       std::shared_ptr<std::atomic<int64_t>> errors,
                       now_fn now)
  : opts_(std::move(opts)), errors_(std::move(errors)),
    outage_(std::move(who), opts_.max_backoff, std::move(now)) {
  // nop
}

db_session::~db_session() {
  if (reported_)
    end_reported_outage();
}

void db_session::end_reported_outage() noexcept {
  health_->outage_ended();
  reported_ = false;
}

db::connection& db_session::get() {
  if (!conn_ || !conn_->is_open()) {
    conn_.reset();
    db::connection_options o;
    o.application_name = opts_.application_name;
    o.statement_timeout = opts_.statement_timeout;
    o.connect_timeout = opts_.connect_timeout;
    o.pooler = opts_.pooler;
    conn_ = std::make_unique<db::connection>(
      db::connection::open(opts_.dsn, o));
    auto server = db::server_of(*conn_);
    if (!server_.empty() && server != server_)
      log::from(who()).info("{} connected to {} (before: {})", who(), server,
                            server_);
    else
      log::from(who()).debug("{} connected to {}", who(), server);
    server_ = server;
  }
  return *conn_;
}

std::chrono::milliseconds db_session::failed(const std::exception& e) {
  if (errors_)
    errors_->fetch_add(1, std::memory_order_relaxed);
  if (health_ && !reported_) {
    health_->outage_began(health_now_ms());
    reported_ = true;
  }
  if (conn_ && !conn_->is_open())
    conn_.reset();
  return outage_.failed(e, server_);
}

} // namespace cmdbus::actors
