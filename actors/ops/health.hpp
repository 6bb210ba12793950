#pragma once

// The worker's health model: per domain and for the worker as a whole a
// state (HEALTHY, DEGRADED, CRITICAL) with short reasons and the figures
// behind them. Plain C++ (no CAF): an HTTP endpoint can serialise it.
// The actors keep the inputs in atomics (domain_health_counters); they are
// read and evaluated only when somebody asks (worker::health()).

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace cmdbus {

enum class health_state { healthy = 0, degraded = 1, critical = 2 };

/// Returns "HEALTHY", "DEGRADED" or "CRITICAL".
const char* to_string(health_state s) noexcept;

/// Thresholds (those of the reference Python library where it has one).
namespace health_limits {
/// DEGRADED at this many handler failures in a row (a success resets).
constexpr int64_t degraded_consecutive_failures = 10;
/// CRITICAL while the domain's database sessions have been failing for at
/// least this long (a few rounds of the writers' capped backoff); DEGRADED
/// before that, from the first failed round trip.
constexpr int64_t critical_db_outage_ms = 30000;
/// A handler is stuck when it has run a command for longer than the
/// visibility timeout plus this grace; DEGRADED from one stuck handler,
/// CRITICAL from critical_stuck_handlers.
constexpr int64_t stuck_grace_ms = 5000;
constexpr int64_t critical_stuck_handlers = 3;
/// A side-effect writer holding work that has committed nothing for this
/// long is stalled (DEGRADED); the supervisor restarts the domain when it
/// stays so for three statement timeouts while the database answers.
constexpr int64_t writer_stalled_ms = 10000;
/// A domain restarted this many times in a row (each within a minute of
/// the previous start) is CRITICAL while it waits to start again;
/// DEGRADED before that.
constexpr int64_t critical_restarts = 3;
/// A poller with free slots that has not finished a read for this many
/// poll intervals (at least min_poller_stale_ms) is stale (DEGRADED): it
/// should read at least once per poll interval.
constexpr int64_t poller_stale_intervals = 10;
constexpr int64_t min_poller_stale_ms = 2000;
} // namespace health_limits

/// The inputs of one domain, as the actors keep them (lock-free).
struct domain_health_counters {
  /// Handler failures (transient or permanent outcomes) since the last
  /// success.
  std::atomic<int64_t> consecutive_failures{0};
  /// Database sessions of this domain's actors in an outage right now.
  std::atomic<int64_t> failing_sessions{0};
  /// Steady-clock milliseconds when the oldest running outage began (0
  /// when none runs).
  std::atomic<int64_t> outage_since_ms{0};
  /// Handlers running one command for longer than the visibility timeout
  /// plus stuck_grace_ms (counted by the supervisor at each heartbeat).
  std::atomic<int64_t> stuck_handlers{0};
  /// Side-effect writers holding work without committing for
  /// writer_stalled_ms (supervisor heartbeat).
  std::atomic<int64_t> stalled_writers{0};
  /// Whether the domain's supervisor ended and waits to be restarted.
  std::atomic<bool> restarting{false};
  /// Restarts in a row (reset when a domain ran for a minute).
  std::atomic<int64_t> restarts{0};
  /// The state last logged (a health_state).
  std::atomic<int> logged_state{0};
  /// Steady-clock milliseconds of the poller's last finished read, or of
  /// the moment it got credits again after having none (0 before its
  /// first read: the domain is not polling yet).
  std::atomic<int64_t> poller_due_since_ms{0};
  /// The poller's free credits (it reads only with credits).
  std::atomic<int64_t> poller_credits{0};
  /// How long a poller with credits may go without a read before it is
  /// stale; 0 turns the check off (tick mode). Set by the worker.
  std::atomic<int64_t> poller_stale_after_ms{0};

  /// The poller finished a read (with or without messages), holding
  /// `credits` afterwards.
  void poller_read(int64_t now_ms, int64_t credits) noexcept;
  /// The poller's credits changed to `credits` outside a read.
  void poller_credited(int64_t now_ms, int64_t credits) noexcept;
  /// Whether the poller has finished a read since the actors started.
  bool polling() const noexcept {
    return poller_due_since_ms.load() > 0;
  }

  /// A session of the domain starts failing.
  void outage_began(int64_t now_ms) noexcept;
  /// A failing session of the domain works again (or is gone).
  void outage_ended() noexcept;
  /// The domain's actors start or stop: what they counted no longer runs
  /// (failures in a row are kept).
  void clear_running() noexcept;
};

/// The figures one evaluation reads.
struct domain_health_inputs {
  int64_t consecutive_failures = 0;
  int64_t failing_sessions = 0;
  /// How long the database has been unavailable (0 when it is not).
  int64_t db_unavailable_ms = 0;
  int64_t stuck_handlers = 0;
  int64_t stalled_writers = 0;
  bool restarting = false;
  int64_t restarts = 0;
  /// How long a poller with free credits has not read (0 when it has no
  /// credits, has not started, or the check is off).
  int64_t poller_idle_ms = 0;
  int64_t poller_stale_after_ms = 0;
};

struct domain_health {
  std::string domain;
  health_state state = health_state::healthy;
  /// Short stable texts, e.g. "12 consecutive handler failures".
  std::vector<std::string> reasons;
  domain_health_inputs figures;
};

struct worker_health {
  /// The worst state of the domains (HEALTHY without domains).
  health_state state = health_state::healthy;
  std::vector<domain_health> domains;
};

/// Reads the counters at `now_ms` (steady-clock milliseconds).
domain_health_inputs read_inputs(const domain_health_counters& c,
                                 int64_t now_ms) noexcept;

/// Evaluates one domain's inputs against health_limits.
domain_health evaluate(std::string domain, const domain_health_inputs& in);

/// Logs `h` (one line with its reasons: info for HEALTHY, warn for
/// DEGRADED, error for CRITICAL) when its state differs from the one last
/// logged for the domain; returns whether it logged.
bool log_if_changed(domain_health_counters& c, const domain_health& h);

/// Evaluates the counters of `domain` now and logs a change.
domain_health evaluate_and_log(const std::string& domain,
                               domain_health_counters& c);

/// Combines the domains: the worker's state is the worst of theirs.
worker_health combine(std::vector<domain_health> domains);

/// Returns the current steady-clock time in milliseconds.
int64_t health_now_ms() noexcept;

} // namespace cmdbus
