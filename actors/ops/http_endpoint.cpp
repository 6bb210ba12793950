#include "cmdbus/actors/ops/http_endpoint.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <httplib.h>

#include "cmdbus/actors/ops/exposition.hpp"
#include "cmdbus/actors/ops/http_server.hpp"
#include "cmdbus/actors/ops/status_page.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus {

namespace {

using clock = std::chrono::steady_clock;

double seconds_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// The queue figures of the domains on one database, read at most once per
/// `min_interval` on a connection of its own (kept between reads); after a
/// failure the next attempt waits `retry_after`, so that scrapes of a
/// worker whose database is down answer at once.
class queue_reader {
public:
  static constexpr auto min_interval = std::chrono::seconds{1};
  static constexpr auto retry_after = std::chrono::seconds{5};

  /// `slots`: where each of `domains` is in a snapshot's domains.
  queue_reader(std::string dsn, db::pooler_mode pooler,
               std::vector<std::string> domains, std::vector<size_t> slots,
               std::vector<std::string> process_domains)
    : dsn_(std::move(dsn)), pooler_(pooler), domains_(std::move(domains)),
      slots_(std::move(slots)), process_domains_(std::move(process_domains)) {
    // nop
  }

  /// Adds this database's queue figures to `s` (or its error to
  /// queue_error; the figures of the other databases stay).
  void fill(status_snapshot& s) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto now = clock::now();
    auto wait = error_.empty() ? min_interval : retry_after;
    if (!read_once_ || now - last_attempt_ >= wait)
      read(now);
    if (read_once_)
      s.queue_age_seconds = std::max(s.queue_age_seconds,
                                     seconds_between(last_read_, now));
    if (!error_.empty()) {
      s.queue_error += (s.queue_error.empty() ? "" : "; ") + error_;
      return;
    }
    for (size_t i = 0; i < slots_.size() && i < figures_.size(); ++i)
      if (slots_[i] < s.domains.size())
        s.domains[slots_[i]].queue = figures_[i];
    s.processes.insert(s.processes.end(), processes_.begin(),
                       processes_.end());
  }

private:
  void read(clock::time_point now) {
    last_attempt_ = now;
    read_once_ = true;
    try {
      if (!conn_ || !conn_->is_open()) {
        conn_.reset();
        db::connection_options opts;
        opts.application_name = "cmdbus-metrics";
        opts.statement_timeout = std::chrono::milliseconds{2000};
        opts.connect_timeout = std::chrono::seconds{2};
        opts.pooler = pooler_;
        conn_ = std::make_unique<db::connection>(
          db::connection::open(dsn_, opts));
      }
      figures_ = db::collect_queue_figures(*conn_, domains_);
      processes_ = db::collect_process_figures(*conn_, process_domains_);
      last_read_ = now;
      if (!error_.empty())
        log::from("http").info("metrics: the queue figures can be read again");
      error_.clear();
    } catch (const std::exception& e) {
      if (conn_ && !conn_->is_open())
        conn_.reset();
      if (error_.empty())
        log::from("http").warn(
          "metrics: cannot read the queue figures ({}); trying again "
          "every {} s",
          log::one_line(e.what()), retry_after.count());
      error_ = log::one_line(e.what());
    }
  }

  std::string dsn_;
  db::pooler_mode pooler_;
  std::vector<std::string> domains_;
  std::vector<size_t> slots_;
  std::vector<std::string> process_domains_;
  std::mutex mtx_;
  std::unique_ptr<db::connection> conn_;
  std::vector<db::queue_figures> figures_;
  std::vector<db::process_figures> processes_;
  std::string error_;
  bool read_once_ = false;
  clock::time_point last_attempt_;
  clock::time_point last_read_;
};

/// The queue figures of every database the domains live on: one reader
/// (one connection) per database, so that one database's outage leaves
/// the others' figures shown.
class queue_readers {
public:
  explicit queue_readers(const status_source& source) {
    config::worker_config where;
    where.dsn = source.dsn;
    where.domain_dsn = source.domain_dsn;
    const auto& domains = source.domains;
    has_processes_ = !source.process_domains.empty();
    std::vector<std::string> all = domains;
    for (auto& d : source.process_domains)
      if (std::find(all.begin(), all.end(), d) == all.end())
        all.push_back(d);
    for (auto& group : config::group_by_dsn(where, all)) {
      std::vector<std::string> mine;
      std::vector<size_t> slots;
      std::vector<std::string> processes;
      for (auto& d : group.domains) {
        auto at = std::find(domains.begin(), domains.end(), d);
        if (at != domains.end()) {
          mine.push_back(d);
          slots.push_back(static_cast<size_t>(at - domains.begin()));
        }
        auto& pd = source.process_domains;
        if (std::find(pd.begin(), pd.end(), d) != pd.end())
          processes.push_back(d);
      }
      readers_.push_back(std::make_unique<queue_reader>(
        group.dsn, source.pooler, std::move(mine), std::move(slots),
        std::move(processes)));
    }
  }

  /// Fills the queue figures of `s` (and queue_error, naming the failures).
  void fill(status_snapshot& s) {
    s.queue_error.clear();
    s.queue_age_seconds = 0;
    s.processes.clear();
    s.has_processes = has_processes_;
    for (auto& reader : readers_)
      reader->fill(s);
  }

private:
  std::vector<std::unique_ptr<queue_reader>> readers_;
  bool has_processes_ = false;
};

} // namespace

struct http_endpoint::impl {
  status_source source;
  queue_readers queues;
  http_server listener{http_endpoint::limits(), "HTTP endpoint"};
  /// Where the routes go.
  httplib::Server& server = listener.routes();

  explicit impl(status_source src) : source(std::move(src)), queues(source) {
    // nop
  }

  /// The status view with its queue figures.
  status_snapshot snapshot() {
    auto s = source.snapshot();
    queues.fill(s);
    return s;
  }

  void routes() {
    server.Get("/healthz",
               [this](const httplib::Request&, httplib::Response& res) {
                 auto s = source.snapshot();
                 res.status = s.state == health_state::critical ? 503 : 200;
                 res.set_content(render_health_json(s), "application/json");
               });
    server.Get("/readyz",
               [this](const httplib::Request&, httplib::Response& res) {
                 auto s = source.snapshot();
                 res.status = s.ready ? 200 : 503;
                 res.set_content(render_ready_json(s), "application/json");
               });
    server.Get("/metrics",
               [this](const httplib::Request&, httplib::Response& res) {
                 res.set_content(render_metrics(snapshot()),
                                 exposition_content_type);
               });
    server.Get("/", [this](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_content(render_status_page(snapshot()),
                      "text/html; charset=utf-8");
    });
  }
};

http_endpoint::http_endpoint(const config::http_address& where,
                             status_source source)
  : impl_(std::make_unique<impl>(std::move(source))) {
  impl_->routes();
  impl_->listener.listen(where);
  log::from("http").info(
    "HTTP endpoint on http://{}:{}/ (/healthz, /readyz, /metrics)", where.host,
    impl_->listener.port());
}

http_endpoint::~http_endpoint() {
  impl_->listener.stop();
}

http_limits http_endpoint::limits() {
  // Health and readiness are answered on a thread of their own, ahead of
  // the rest, and a new connection makes room by closing an idle or slow
  // one (actors/ops/http_server.hpp): a probe is answered while scrapers,
  // browsers or slow clients hold every other connection. Two threads for
  // the rest: /metrics reads its queue figures at most once a second
  // whatever the number of scrapers.
  http_limits l;
  // Each connection reading a request costs a descriptor and a buffer,
  // not a thread: the limit can be generous, which makes room-making
  // rarer and gives a probe more time to send its request before it
  // could be chosen.
  l.max_connections = 256;
  l.request_timeout = std::chrono::seconds{2};
  l.idle_timeout = std::chrono::seconds{5};
  l.write_timeout = std::chrono::seconds{5};
  l.max_body_bytes = 0;
  l.threads = 2;
  l.max_waiting = 16;
  l.reserved_paths = {"/healthz", "/readyz"};
  return l;
}

int http_endpoint::port() const noexcept {
  return impl_->listener.port();
}

status_snapshot http_endpoint::snapshot() {
  return impl_->snapshot();
}

} // namespace cmdbus
