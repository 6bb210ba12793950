#include "bench/chaos/monitor.hpp"

#include <optional>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::chaos {

using namespace std::chrono_literals;

progress_monitor::progress_monitor(std::string dsn, std::string domain)
  : dsn_(std::move(dsn)), domain_(std::move(domain)) {
  // nop
}

progress_monitor::~progress_monitor() {
  stop();
}

void progress_monitor::start() {
  thread_ = std::thread([this] { run(); });
}

void progress_monitor::stop() {
  stop_ = true;
  if (thread_.joinable())
    thread_.join();
}

std::vector<progress_monitor::sample> progress_monitor::samples() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return samples_;
}

void progress_monitor::run() {
  const auto period = 200ms;
  const std::string sql = std::string{"SELECT count(*) FROM commandbus.command "
                                      "WHERE domain = $1 AND status IN "}
                          + final_statuses;
  std::optional<db::connection> conn;
  auto next = clock::now();
  while (!stop_) {
    try {
      if (!conn) {
        db::connection_options opts;
        opts.application_name = "cmdbus-chaos-monitor";
        // Short, so that a stalled or restarting database costs a sample,
        // not the monitor.
        opts.statement_timeout = 1000ms;
        opts.connect_timeout = std::chrono::seconds{2};
        conn.emplace(db::connection::open(dsn_, opts));
      }
      auto n = conn->query(sql, domain_).int64(0, 0);
      std::lock_guard<std::mutex> guard{mtx_};
      samples_.push_back({clock::now(), n});
    } catch (const std::exception&) {
      // Any failure: a new connection for the next sample.
      conn.reset();
    }
    next += period;
    auto now = clock::now();
    if (next < now)
      next = now;
    while (!stop_ && clock::now() < next)
      std::this_thread::sleep_for(std::min<clock::duration>(
        next - clock::now(), std::chrono::milliseconds{20}));
  }
}

void compute_recovery(std::vector<fault_record>& faults,
                      const std::vector<progress_monitor::sample>& samples) {
  for (auto& f : faults) {
    f.recovery_seconds.reset();
    std::optional<int64_t> baseline;
    for (auto& s : samples) {
      if (s.at <= f.end)
        continue;
      if (!baseline) {
        baseline = s.final_count;
        continue;
      }
      if (s.final_count > *baseline) {
        f.recovery_seconds
          = std::chrono::duration<double>(s.at - f.end).count();
        break;
      }
    }
  }
}

} // namespace cmdbus::chaos
