// Retention under load (docs/operations.md, "Retention"): a history of
// --history finished commands (1 million by default, three audit rows each,
// written set-based with old timestamps) is pruned in chunks, as `cmdbus
// prune` does, while a worker processes a steady backlog of no-op commands
// in another domain. The worker's throughput is measured in alternating
// slices with the prune running and paused (the same run, the same
// machine drift for both) and printed as a ratio, with the prune's rate
// and chunk latencies in those slices. With --to-the-end the prune then
// goes on beside the worker until the whole history is gone, and the
// benchmark fails unless nothing of it is left (about two minutes for the
// default history; CI stops after the slices).
//
// Usage: cmdbus-retention-bench [--seconds S] [--history N] [--chunk N]
//        [--to-the-end]   (DSN from CMDBUS_DSN)

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "bench/bench_util.hpp"
#include "cmdbus/actors/worker.hpp"
#include "cmdbus/db/jobs.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/retention.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Writes `n` COMPLETED commands of `domain`, last changed 40 days ago, with
// SENT, RECEIVED and COMPLETED audit rows, in slices of 200000 (one
// statement each: the audit rows from the inserted commands).
void write_history(db::connection& conn, const std::string& domain, int n) {
  auto queue = db::command_queue(domain);
  for (int from = 1; from <= n; from += 200000) {
    int to = std::min(n, from + 199999);
    conn.query(
      "WITH c AS (INSERT INTO commandbus.command (domain, queue_name, msg_id, "
      "command_id, command_type, status, attempts, max_attempts, created_at, "
      "updated_at) SELECT $1, $2, g, gen_random_uuid(), 'Noop', 'COMPLETED', "
      "1, 3, now() - interval '40 days' - g * interval '1 ms', now() - "
      "interval '40 days' - g * interval '1 ms' FROM generate_series($3::int, "
      "$4::int) g RETURNING domain, command_id, updated_at) INSERT INTO "
      "commandbus.audit (domain, command_id, event_type, ts) SELECT "
      "c.domain, c.command_id, e, c.updated_at FROM c CROSS JOIN "
      "unnest(ARRAY['SENT', 'RECEIVED', 'COMPLETED']) e",
      domain, queue, from, to);
  }
}

// The prune, on a thread of its own with a connection of its own: chunks
// while `running` is set, waiting while it is not, until the pass is done.
class pruner {
public:
  pruner(const std::string& dsn, const std::string& domain, int chunk)
    : conn_(db::connection::open(dsn)),
      pass_({domain},
            retention_ages{std::chrono::milliseconds{30LL * 86'400'000},
                           std::nullopt, std::nullopt, std::nullopt},
            chunk),
      thread_([this] { run(); }) {
    // nop
  }

  ~pruner() {
    {
      std::lock_guard<std::mutex> g{mtx_};
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void set_running(bool on) {
    {
      std::lock_guard<std::mutex> g{mtx_};
      running_ = on;
    }
    cv_.notify_all();
  }

  bool done() const {
    return done_;
  }

  /// Waits until the pass is done.
  void finish() {
    set_running(true);
    std::unique_lock<std::mutex> g{mtx_};
    cv_.wait(g, [this] { return done_.load(); });
  }

  int64_t removed() const {
    return removed_;
  }
  int64_t audits() const {
    return audits_;
  }
  int64_t chunks() const {
    return static_cast<int64_t>(chunk_ms_.size());
  }
  double busy_seconds() const {
    std::lock_guard<std::mutex> g{mtx_};
    return busy_;
  }

  /// The chunk latency at quantile q (0..1), in milliseconds.
  double chunk_ms(double q) const {
    std::lock_guard<std::mutex> g{mtx_};
    return bench::quantile(chunk_ms_, q);
  }

private:
  void run() {
    while (true) {
      {
        std::unique_lock<std::mutex> g{mtx_};
        cv_.wait(g, [this] { return quit_ || running_; });
        if (quit_)
          return;
      }
      auto t0 = clock_type::now();
      prune_counts chunk;
      db::run_under_job_lock(conn_, db::retention_job_name,
                             [&](db::connection& c) { chunk = pass_.step(c); });
      auto secs = seconds_since(t0);
      removed_ += chunk.commands;
      audits_ += chunk.command_audits;
      {
        std::lock_guard<std::mutex> g{mtx_};
        busy_ += secs;
        chunk_ms_.push_back(secs * 1000);
        if (pass_.done()) {
          done_ = true;
          cv_.notify_all();
          return;
        }
      }
    }
  }

  db::connection conn_;
  db::prune_pass pass_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool running_ = false;
  bool quit_ = false;
  std::atomic<bool> done_{false};
  std::atomic<int64_t> removed_{0};
  std::atomic<int64_t> audits_{0};
  double busy_ = 0;
  std::vector<double> chunk_ms_;
  std::thread thread_;
};

// Keeps at least `low` messages waiting in `domain`'s queue while it runs,
// sending batches of 2000 no-op commands.
class feeder {
public:
  feeder(command_bus& bus, const std::string& dsn, const std::string& domain,
         int low)
    : bus_(bus), conn_(db::connection::open(dsn)), domain_(domain), low_(low),
      thread_([this] { run(); }) {
    // nop
  }

  ~feeder() {
    stop_ = true;
    thread_.join();
  }

private:
  void run() {
    auto queue = db::command_queue(domain_);
    auto data = json::parse("{}");
    while (!stop_) {
      auto waiting = conn_
                       .exec("SELECT count(*) FROM pgmq.q_" + queue
                             + " WHERE vt <= now()")
                       .int64(0, 0);
      if (waiting >= low_) {
        std::this_thread::sleep_for(20ms);
        continue;
      }
      std::vector<send_request> reqs;
      for (int i = 0; i < 2000; ++i) {
        send_request r;
        r.domain = domain_;
        r.command_type = "Noop";
        r.command_id = uuid::random();
        r.data = data;
        reqs.push_back(std::move(r));
      }
      bus_.send_batch(reqs);
    }
  }

  command_bus& bus_;
  db::connection conn_;
  std::string domain_;
  int low_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace

int main(int argc, char** argv) {
  auto seconds = std::max(2, bench::int_option(argc, argv, "--seconds", 3));
  auto history = std::max(1000, bench::int_option(argc, argv, "--history",
                                                  1'000'000));
  auto chunk = std::max(1, bench::int_option(argc, argv, "--chunk", 1000));
  bool to_the_end = bench::flag(argc, argv, "--to-the-end");
  spdlog::set_level(spdlog::level::warn);
  auto run_id = uuid::random().to_string().substr(0, 8);
  bench::database base;
  auto& conn = base.conn;
  auto old_domain = "rhist_" + run_id;
  auto live_domain = "rlive_" + run_id;
  std::printf("== retention benchmark (%d finished commands with 3 audit rows "
              "each, chunks of %d)\n",
              history, chunk);

  auto t0 = clock_type::now();
  write_history(conn, old_domain, history);
  conn.exec("ANALYZE commandbus.command, commandbus.audit");
  std::printf("  history written in %.1f s\n", seconds_since(t0));

  db::create_queue(conn, db::command_queue(live_domain));
  handler_registry reg;
  reg.add(
    live_domain, "Noop",
    [](const command&, handler_context&) { return json::null(); },
    handler_mode::non_blocking);
  config::worker_config cfg;
  cfg.dsn = base.dsn;
  cfg.domains = {live_domain};
  cfg.concurrency = 16;
  worker w{cfg, std::move(reg)};
  feeder feed{base.bus, base.dsn, live_domain, 4000};
  w.start();
  // Warm up: the worker reaches its pace before the first slice.
  auto warm = w.stats().completed;
  auto warm_until = clock_type::now() + 1s;
  while (clock_type::now() < warm_until || w.stats().completed < warm + 1000)
    std::this_thread::sleep_for(10ms);

  pruner prune{base.dsn, old_domain, chunk};
  // Alternating slices: without the prune, then with it, `rounds` times.
  const int rounds = 6;
  auto slice = std::chrono::milliseconds{seconds * 1000} / rounds;
  bench::rate without{"worker without pruning"};
  bench::rate with{"worker while pruning"};
  int64_t removed_in_slices = 0;
  for (int i = 0; i < rounds && !prune.done(); ++i)
    for (auto* r : {&without, &with}) {
      bool on = r == &with;
      prune.set_running(on);
      auto removed0 = prune.removed();
      auto c0 = w.stats().completed;
      auto s0 = clock_type::now();
      std::this_thread::sleep_for(slice);
      r->items += w.stats().completed - c0;
      r->seconds += seconds_since(s0);
      if (on)
        removed_in_slices += prune.removed() - removed0;
    }
  for (auto* r : {&without, &with})
    r->per_second = r->seconds > 0 ? r->items / r->seconds : 0;
  std::printf("-- worker throughput (no-op handler, concurrency 16, a "
              "backlog kept), slices of %.1f s alternating\n",
              std::chrono::duration<double>(slice).count());
  bench::print(without);
  bench::print(with, &without);
  std::printf("    removed while measured: %lld commands (%.0f /s while "
              "running beside the worker)\n",
              static_cast<long long>(removed_in_slices),
              with.seconds > 0 ? removed_in_slices / with.seconds : 0.0);

  // With --to-the-end, the rest of the prune, beside the worker still
  // running; else the prune stops after its chunk in progress.
  auto p0 = clock_type::now();
  if (to_the_end)
    prune.finish();
  else
    prune.set_running(false);
  auto rest = seconds_since(p0);
  w.stop(10s).get();
  auto left = conn
                .query("SELECT count(*) FROM commandbus.command WHERE domain "
                       "= $1",
                       old_domain)
                .int64(0, 0);
  std::printf("-- the prune (%lld chunks%s)\n",
              static_cast<long long>(prune.chunks()),
              to_the_end ? ", to the end" : ", in the measured slices");
  bench::rate pr{
    "commands removed (with their audit rows)",
    prune.busy_seconds() > 0 ? prune.removed() / prune.busy_seconds() : 0,
    prune.removed(), prune.busy_seconds()};
  bench::print(pr);
  std::printf("    %lld audit rows; %.1f s after the measured slices; "
              "chunk latency p50 %.1f ms, p99 %.1f ms, max %.1f ms; %lld "
              "history commands left%s\n",
              static_cast<long long>(prune.audits()), rest, prune.chunk_ms(0.5),
              prune.chunk_ms(0.99), prune.chunk_ms(1.0),
              static_cast<long long>(left), to_the_end ? " (expected 0)" : "");
  bench::verdict("worker throughput while pruning",
                 without.per_second > 0 ? with.per_second / without.per_second
                                        : 0,
                 0.5, "x");
  bench::print_peak_rss("the benchmark with its worker and the prune");
  return !to_the_end || left == 0 ? 0 : 1;
}
