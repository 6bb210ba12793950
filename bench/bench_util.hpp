#pragma once

// Helpers shared by the cmdbus benchmarks: timing loops over threads and
// printing figures beside a baseline measured in the same run.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/types.h>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"

namespace cmdbus::bench {

/// The value of `--NAME N` among the arguments, else `fallback`.
inline int int_option(int argc, char** argv, const std::string& name,
                      int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name)
      return std::atoi(argv[i + 1]);
  return fallback;
}

/// CPU seconds (user + system) of this process.
inline double self_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec)
         + static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/// The memory target: every benchmark's processes stay under it.
constexpr double rss_target_mib = 64;

/// Peak resident set of this process so far (getrusage), in KiB.
inline long peak_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/// Peak resident set so far of the running process `pid` (VmHWM in
/// /proc/PID/status), in KiB; -1 when it cannot be read.
inline long peak_rss_kib_of(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::atol(line.c_str() + 6);
  return -1;
}

/// Creates a fresh directory /tmp/PREFIX-XXXXXX for a benchmark's logs.
inline std::string temp_dir(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr)
    throw std::runtime_error("cannot create " + pattern);
  return buf.data();
}

/// Whether `--NAME` is among the arguments.
/// The value at quantile `q` (0..1) of `values` (taken by value and sorted
/// here); a default value when there are none.
template <class T>
T quantile(std::vector<T> values, double q) {
  if (values.empty())
    return T{};
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(q * values.size()))];
}

inline bool flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == name)
      return true;
  return false;
}

inline db::pool_options small_pool(const std::string& dsn) {
  db::pool_options popts;
  popts.dsn = dsn;
  popts.max_size = 4;
  return popts;
}

/// The database of a benchmark (CMDBUS_DSN): a small pool with the send
/// API over it, and a connection of its own for the checks.
struct database {
  std::string dsn;
  db::pool pool;
  command_bus bus;
  db::connection conn;

  database()
    : dsn(std::getenv("CMDBUS_DSN") ? std::getenv("CMDBUS_DSN") : ""),
      pool(small_pool(dsn)), bus(pool), conn(db::connection::open(dsn)) {
    // nop
  }
};

/// A measured rate.
struct rate {
  std::string name;
  double per_second = 0;
  int64_t items = 0;
  double seconds = 0;
};

/// Settles the database before a phase: the dead rows of earlier phases
/// (and of whatever ran before) would otherwise have autovacuum and a
/// checkpoint compete with the phase, by chance more in one phase than in
/// another.
inline void settle(db::connection& conn) {
  // The process tables too: on a fresh database their prepared statements
  // would otherwise keep plans made for empty tables until autovacuum's
  // first ANALYZE (within a minute in production).
  conn.exec("VACUUM (ANALYZE) commandbus.command, commandbus.audit, "
            "commandbus.process, commandbus.process_audit");
  try {
    conn.exec("CHECKPOINT");
  } catch (const std::exception& e) {
    std::printf("  (no CHECKPOINT before the phase: %s)\n", e.what());
  }
}

/// Removes what a benchmark left of `domain`: its audit and command rows
/// and its queues (DOMAIN__commands, and any other DOMAIN__* a worker
/// created, such as the process replies).
inline void drop_domain(db::connection& conn, const std::string& domain) {
  conn.query("DELETE FROM commandbus.audit WHERE domain = $1", domain);
  conn.query("DELETE FROM commandbus.command WHERE domain = $1", domain);
  conn.query("SELECT pgmq.drop_queue(queue_name) FROM pgmq.list_queues() "
             "WHERE left(queue_name, length($1) + 2) = $1 || '__'",
             domain);
}

/// Runs `body(thread_index)` on `threads` threads until `duration` passed;
/// each call returns how many items it moved. Returns items per second.
inline rate measure(const std::string& name, int threads,
                    std::chrono::milliseconds duration,
                    const std::function<int64_t(int)>& body) {
  std::atomic<int64_t> total{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + duration;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      while (!go.load())
        std::this_thread::yield();
      int64_t n = 0;
      while (std::chrono::steady_clock::now() < deadline)
        n += body(t);
      total += n;
    });
  start = std::chrono::steady_clock::now();
  deadline = start + duration;
  go = true;
  for (auto& th : pool)
    th.join();
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - start)
                .count();
  return {name, static_cast<double>(total.load()) / secs, total.load(), secs};
}

/// Measures `a` and `b` (each like measure()) alternately in `rounds`
/// slices of duration / rounds, so that the machine's drift during the run
/// (a checkpoint, autovacuum, another process) weighs on both alike; for
/// figures compared as a ratio. Returns the totals of `a` and `b`.
inline std::pair<rate, rate>
measure_interleaved(const std::string& name_a, const std::string& name_b,
                    int threads, std::chrono::milliseconds duration, int rounds,
                    const std::function<int64_t(int)>& a,
                    const std::function<int64_t(int)>& b) {
  rate ra{name_a}, rb{name_b};
  auto slice = duration / rounds;
  for (int i = 0; i < rounds; ++i)
    for (auto [fn, total] :
         {std::make_pair(&a, &ra), std::make_pair(&b, &rb)}) {
      auto r = measure(total->name, threads, slice, *fn);
      total->items += r.items;
      total->seconds += r.seconds;
    }
  for (auto* r : {&ra, &rb})
    r->per_second = r->seconds > 0 ? r->items / r->seconds : 0;
  return {ra, rb};
}

/// Prints one result line, with its ratio to `baseline` when given.
inline void print(const rate& r, const rate* baseline = nullptr) {
  if (baseline != nullptr && baseline->per_second > 0)
    std::printf("  %-44s %10.0f /s  (%lld in %.1f s)  ratio %.2fx vs %s\n",
                r.name.c_str(), r.per_second,
                static_cast<long long>(r.items), r.seconds,
                r.per_second / baseline->per_second, baseline->name.c_str());
  else
    std::printf("  %-44s %10.0f /s  (%lld in %.1f s)\n", r.name.c_str(),
                r.per_second, static_cast<long long>(r.items), r.seconds);
  std::fflush(stdout);
}

/// Prints whether `value` meets `target` (figures only; never fails).
inline void verdict(const std::string& what, double value, double target,
                    const char* unit) {
  std::printf("  target %-36s %s: %.2f%s (target >= %.2f%s)\n", what.c_str(),
              value >= target ? "MET" : "MISSED", value, unit, target, unit);
  std::fflush(stdout);
}

/// Prints whether `value` stays at or below `limit` (figures only).
inline void verdict_at_most(const std::string& what, double value,
                            double limit, const char* unit) {
  std::printf("  target %-36s %s: %.2f%s (target <= %.2f%s)\n", what.c_str(),
              value <= limit ? "MET" : "MISSED", value, unit, limit, unit);
  std::fflush(stdout);
}

/// Prints the peak RSS of this process (`what` it ran), and that of the
/// largest of its child processes that ended, when it had any, each against
/// the 64 MiB target (figures only).
inline void print_peak_rss(const std::string& what) {
  std::printf("-- memory\n");
  verdict_at_most("peak RSS, " + what,
                  static_cast<double>(peak_rss_kib()) / 1024, rss_target_mib,
                  " MiB");
  rusage children{};
  getrusage(RUSAGE_CHILDREN, &children);
  if (children.ru_maxrss > 0)
    verdict_at_most("peak RSS, its largest child process",
                    static_cast<double>(children.ru_maxrss) / 1024,
                    rss_target_mib, " MiB");
}

} // namespace cmdbus::bench
