// Integration tests of the worker runtime (`cmdbus::worker`, actors/*,
// db/worker_store.cpp, sql/commandbus/V004__cmdbus_worker.sql) against the
// real database: rcmd.md §1.4-§1.8, §2.3, §4 and the §5.1 scenarios
// test_worker / test_retry / test_exhaustion / test_permanent_failure /
// test_business_rule_exception; DECISIONS.md D5, D6, D7, D9; the Java spec's
// WK-1..WK-11; story S004; and the `cmdbus worker` CLI.
//
// Every test works in its own domain(s). Conditions are awaited by polling
// with a deadline (`eventually`), never by sleeping a fixed time. State is
// checked with SQL on a separate connection.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/handler_registry.hpp"
#include "actors/worker.hpp"
#include "config/worker_config.hpp"
#include "db/command_bus.hpp"
#include "db/connection.hpp"
#include "db/pool.hpp"
#include "db/queue_name.hpp"
#include "model/errors.hpp"
#include "model/json.hpp"
#include "model/types.hpp"
#include "model/uuid.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

using opt_str = std::optional<std::string>;
using strings = std::vector<std::string>;

// -- waiting -----------------------------------------------------------------

using test::eventually;

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
config::worker_config make_cfg(const strings& domains, int concurrency = 4) {
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
void stop_worker(worker& w, std::chrono::milliseconds timeout = 10s) {
  if (w.is_running())
    w.stop(timeout).get();
}

send_request make_req(const std::string& domain, const std::string& type,
                      const std::string& data = "{}") {
  send_request req;
  req.domain = domain;
  req.command_type = type;
  req.command_id = uuid::random();
  req.data = json::parse(data);
  return req;
}

std::string queue_of(const std::string& domain) {
  return db::command_queue(domain);
}

// -- state checks (SQL) ------------------------------------------------------

/// Returns the first column of the first row as text (nullopt for NULL or
/// no row).
template <class... Ts>
opt_str scalar(db::connection& c, const std::string& sql, const Ts&... xs) {
  auto r = c.query(sql, xs...);
  if (r.rows() == 0 || r.is_null(0, 0))
    return std::nullopt;
  return std::string{r.text(0, 0)};
}

/// Returns a column of the command row as text.
opt_str column(db::connection& c, const std::string& domain, const uuid& id,
               const std::string& col) {
  return scalar(c,
                "SELECT " + col
                  + "::text FROM commandbus.command WHERE domain = $1 AND "
                    "command_id = $2::uuid",
                domain, id.to_string());
}

opt_str status_of(db::connection& c, const std::string& domain,
                  const uuid& id) {
  return column(c, domain, id, "status");
}

int attempts_of(db::connection& c, const std::string& domain, const uuid& id) {
  auto x = column(c, domain, id, "attempts");
  return x ? std::stoi(*x) : -1;
}

bool has_status(db::connection& c, const std::string& domain, const uuid& id,
                const std::string& status) {
  return status_of(c, domain, id) == opt_str{status};
}

bool all_have_status(db::connection& c, const std::string& domain,
                     const std::vector<uuid>& ids, const std::string& status) {
  for (auto& id : ids)
    if (!has_status(c, domain, id, status))
      return false;
  return true;
}

/// The audit event types of a command, in order (ts, audit_id).
strings events(db::connection& c, const std::string& domain, const uuid& id) {
  auto r = c.query("SELECT event_type FROM commandbus.audit WHERE domain = $1 "
                   "AND command_id = $2::uuid ORDER BY ts, audit_id",
                   domain, id.to_string());
  strings out;
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.text(i, 0));
  return out;
}

/// `details_json #>> path` of the `nth` audit event of type `event`.
opt_str audit_detail(db::connection& c, const std::string& domain,
                     const uuid& id, const std::string& event,
                     const std::string& path, int nth = 0) {
  return scalar(c,
                "SELECT details_json #>> $4::text[] FROM commandbus.audit "
                "WHERE domain = $1 AND command_id = $2::uuid AND event_type = "
                "$3 ORDER BY ts, audit_id LIMIT 1 OFFSET $5",
                domain, id.to_string(), event, path, nth);
}

int64_t count_events(db::connection& c, const std::string& domain,
                     const uuid& id, const std::string& event) {
  return c
    .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1 AND "
           "command_id = $2::uuid AND event_type = $3",
           domain, id.to_string(), event)
    .int64(0, 0);
}

/// Rows of pgmq.q_<queue> ("q") or pgmq.a_<queue> ("a").
int64_t table_rows(db::connection& c, const std::string& prefix,
                   const std::string& queue) {
  db::validate_queue_name(queue);
  return c.exec("SELECT count(*) FROM pgmq." + prefix + "_" + queue)
    .int64(0, 0);
}

int64_t queue_rows(db::connection& c, const std::string& queue) {
  return table_rows(c, "q", queue);
}

int64_t archive_rows(db::connection& c, const std::string& queue) {
  return table_rows(c, "a", queue);
}

bool archived(db::connection& c, const std::string& queue, int64_t msg_id) {
  db::validate_queue_name(queue);
  return c
           .query("SELECT count(*) FROM pgmq.a_" + queue + " WHERE msg_id = $1",
                  static_cast<long long>(msg_id))
           .int64(0, 0)
         == 1;
}

/// The messages of a (reply) queue as JSON text, oldest first.
strings messages(db::connection& c, const std::string& queue) {
  db::validate_queue_name(queue);
  auto r = c.exec("SELECT message::text FROM pgmq.q_" + queue
                  + " ORDER BY msg_id");
  strings out;
  for (int i = 0; i < r.rows(); ++i)
    out.emplace_back(r.text(i, 0));
  return out;
}

/// `text::jsonb #>> path` ("{a,b}"), nullopt for a missing key / JSON null.
opt_str jget(db::connection& c, const std::string& text,
             const std::string& path) {
  return scalar(c, "SELECT $1::jsonb #>> $2::text[]", text, path);
}

/// Whether `text::jsonb #> path` equals `expected::jsonb`.
bool jeq(db::connection& c, const std::string& text, const std::string& path,
         const std::string& expected) {
  return scalar(c, "SELECT (($1::jsonb #> $2::text[]) = $3::jsonb)::text",
                text, path, expected)
         == opt_str{"true"};
}

/// Whether the JSON object `text` has the top-level key `key`.
bool jhas(db::connection& c, const std::string& text, const std::string& key) {
  return scalar(c, "SELECT ($1::jsonb ? $2)::text", text, key)
         == opt_str{"true"};
}

/// Whether the message `msg_id` of `queue` has vt > now() + `interval`.
bool vt_beyond(db::connection& c, const std::string& queue, int64_t msg_id,
               const std::string& interval) {
  db::validate_queue_name(queue);
  return scalar(c,
                "SELECT (vt > now() + $2::interval)::text FROM pgmq.q_" + queue
                  + " WHERE msg_id = $1",
                static_cast<long long>(msg_id), interval)
         == opt_str{"true"};
}

json obj(const std::string& text) {
  return json::parse(text);
}

} // namespace

// -- WK-1, S004: reading the right queue ------------------------------------

TEST(WorkerRun, ReadsOnlyItsOwnDomainAndProcessesCommandsSentBeforeStart) {
  env e;
  auto mine = test::unique_name("wk");
  auto other = test::unique_name("wk");
  auto a1 = e.bus.send(make_req(mine, "Ok"));
  auto a2 = e.bus.send(make_req(mine, "Ok"));
  auto b1 = e.bus.send(make_req(other, "Ok"));
  std::atomic<int> calls{0};
  handler_registry reg;
  auto ok = [&](const command&, handler_context&) -> json {
    ++calls;
    return json::null();
  };
  reg.add(mine, "Ok", ok);
  // A handler for the other domain too: only the queue choice keeps the
  // worker away from it.
  reg.add(other, "Ok", ok);
  worker w{make_cfg({mine}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  EXPECT_FALSE(w.is_running());
  w.start();
  EXPECT_TRUE(w.is_running());
  EXPECT_EQ(w.domain(), mine);
  EXPECT_THROW(w.start(), std::logic_error);
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, mine, a1.command_id, "COMPLETED")
           && has_status(e.conn, mine, a2.command_id, "COMPLETED");
  }));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(status_of(e.conn, other, b1.command_id), opt_str{"PENDING"});
  EXPECT_EQ(attempts_of(e.conn, other, b1.command_id), 0);
  EXPECT_EQ(queue_rows(e.conn, queue_of(other)), 1);
  // S004: RECEIVED audit with attempt and the delivery's msg_id.
  EXPECT_EQ(audit_detail(e.conn, mine, a1.command_id, "RECEIVED", "{attempt}"),
            opt_str{"1"});
  EXPECT_EQ(audit_detail(e.conn, mine, a1.command_id, "RECEIVED", "{msg_id}"),
            opt_str{std::to_string(a1.msg_id)});
  EXPECT_EQ(
    audit_detail(e.conn, mine, a1.command_id, "RECEIVED", "{max_attempts}"),
    opt_str{"3"});
  EXPECT_EQ(attempts_of(e.conn, mine, a1.command_id), 1);
  stop_worker(w);
  EXPECT_FALSE(w.is_running());
  EXPECT_EQ(status_of(e.conn, other, b1.command_id), opt_str{"PENDING"});
  auto s = w.stats();
  EXPECT_EQ(s.received, 2);
  EXPECT_EQ(s.completed, 2);
}

// -- WK-2, WK-10: concurrency limit and in-flight count ----------------------

TEST(WorkerRun, RespectsConcurrencyLimitAndCountsInFlight) {
  env e;
  auto d = test::unique_name("wk");
  constexpr int concurrency = 3;
  constexpr int total = 8;
  std::vector<uuid> ids;
  for (int i = 0; i < total; ++i)
    ids.push_back(e.bus.send(make_req(d, "Block")).command_id);
  gate g;
  concurrency_probe probe;
  std::atomic<int> done{0};
  handler_registry reg;
  reg.add(d, "Block", [&](const command&, handler_context&) -> json {
    probe.enter();
    g.wait();
    probe.leave();
    ++done;
    return json::null();
  });
  worker w{make_cfg({d}, concurrency), std::move(reg)};
  std::atomic<bool> sampling{true};
  std::atomic<size_t> max_in_flight{0};
  std::thread sampler;
  finally cleanup{[&] {
    g.open();
    stop_worker(w);
    sampling = false;
    if (sampler.joinable())
      sampler.join();
  }};
  w.start();
  sampler = std::thread([&] {
    while (sampling) {
      auto n = w.in_flight_count();
      if (n > max_in_flight)
        max_in_flight = n;
      std::this_thread::sleep_for(1ms);
    }
  });
  ASSERT_TRUE(eventually([&] { return probe.running() == concurrency; }));
  // All slots are busy: in_flight_count matches the running handlers and
  // nothing else is claimed.
  EXPECT_EQ(w.in_flight_count(), static_cast<size_t>(concurrency));
  EXPECT_TRUE(eventually([&] {
    return scalar(e.conn,
                  "SELECT count(*)::text FROM commandbus.command WHERE domain "
                  "= $1 AND status = 'IN_PROGRESS'",
                  d)
           == opt_str{std::to_string(concurrency)};
  }));
  EXPECT_EQ(scalar(e.conn,
                   "SELECT count(*)::text FROM commandbus.command WHERE domain "
                   "= $1 AND status = 'PENDING'",
                   d),
            opt_str{std::to_string(total - concurrency)});
  g.open();
  ASSERT_TRUE(eventually([&] {
    return all_have_status(e.conn, d, ids, "COMPLETED");
  }));
  EXPECT_TRUE(eventually([&] { return w.in_flight_count() == 0; }));
  EXPECT_EQ(probe.max(), concurrency);
  EXPECT_LE(max_in_flight.load(), static_cast<size_t>(concurrency));
  EXPECT_EQ(done.load(), total);
  stop_worker(w);
  EXPECT_EQ(w.in_flight_count(), 0u);
  EXPECT_EQ(w.stats().completed, total);
}

// -- prefetch
// ------------------------------------------------------------------

// With prefetch, a domain claims up to concurrency + prefetch messages; the
// extra ones wait for a free handler, and no more handlers run at once than
// the concurrency.
TEST(WorkerRun, PrefetchClaimsAheadButRunsNoMoreThanTheConcurrency) {
  env e;
  auto d = test::unique_name("wk");
  constexpr int concurrency = 3;
  constexpr int prefetch = 2;
  constexpr int total = 8;
  std::vector<uuid> ids;
  for (int i = 0; i < total; ++i)
    ids.push_back(e.bus.send(make_req(d, "Block")).command_id);
  gate g;
  concurrency_probe probe;
  handler_registry reg;
  reg.add(d, "Block", [&](const command&, handler_context&) -> json {
    probe.enter();
    g.wait();
    probe.leave();
    return json::null();
  });
  auto cfg = make_cfg({d}, concurrency);
  cfg.prefetch = prefetch;
  worker w{cfg, std::move(reg)};
  finally cleanup{[&] {
    g.open();
    stop_worker(w);
  }};
  w.start();
  ASSERT_TRUE(eventually([&] { return probe.running() == concurrency; }));
  ASSERT_TRUE(eventually([&] {
    return w.in_flight_count() == static_cast<size_t>(concurrency + prefetch);
  }));
  auto count = [&](const char* status) {
    return scalar(e.conn,
                  "SELECT count(*)::text FROM commandbus.command WHERE "
                  "domain = $1 AND status = $2",
                  d, status);
  };
  EXPECT_EQ(count("IN_PROGRESS"),
            opt_str{std::to_string(concurrency + prefetch)});
  EXPECT_EQ(count("PENDING"),
            opt_str{std::to_string(total - concurrency - prefetch)});
  g.open();
  ASSERT_TRUE(eventually([&] {
    return all_have_status(e.conn, d, ids, "COMPLETED");
  }));
  EXPECT_EQ(probe.max(), concurrency);
  // Each message was read once: nothing waited past its lease.
  EXPECT_EQ(scalar(e.conn,
                   "SELECT max(attempts)::text FROM commandbus.command WHERE "
                   "domain = $1",
                   d),
            opt_str{"1"});
}

// A prefetched message that waits for a handler longer than half its
// visibility timeout gets its lease extended, so that it is not read again
// (by this or another worker) while it waits.
TEST(WorkerRun, PrefetchedMessageKeepsItsLeaseWhileItWaits) {
  env e;
  auto d = test::unique_name("wk");
  auto first = e.bus.send(make_req(d, "Block"));
  auto second = e.bus.send(make_req(d, "Block"));
  gate g;
  std::atomic<int> started{0};
  handler_registry reg;
  reg.add(d, "Block", [&](const command&, handler_context&) -> json {
    if (++started == 1)
      g.wait(30s);
    return json::null();
  });
  auto cfg = make_cfg({d}, 1);
  cfg.prefetch = 1;
  cfg.visibility_timeout = 2s;
  cfg.statement_timeout = 1s;
  worker w{cfg, std::move(reg)};
  finally cleanup{[&] {
    g.open();
    stop_worker(w);
  }};
  w.start();
  auto queue = d + "__commands";
  auto vt_of = [&](int64_t msg_id) {
    return scalar(e.conn,
                  "SELECT (extract(epoch FROM vt) * 1000000)::bigint::text "
                  "FROM pgmq.q_"
                      + queue + " WHERE msg_id = $1::bigint",
                  msg_id);
  };
  // The second message is claimed (read once) and waits behind the first.
  ASSERT_TRUE(eventually([&] {
    return started.load() == 1
           && scalar(e.conn,
                     "SELECT read_ct::text FROM pgmq.q_" + queue
                         + " WHERE msg_id = $1::bigint",
                     second.msg_id)
                  == opt_str{"1"};
  }));
  auto claimed_vt = vt_of(second.msg_id);
  ASSERT_TRUE(claimed_vt);
  // The heartbeat pushes its visibility timeout out while it waits.
  ASSERT_TRUE(eventually([&] {
    auto vt = vt_of(second.msg_id);
    return vt && std::stoll(*vt) > std::stoll(*claimed_vt);
  }));
  EXPECT_EQ(started.load(), 1);
  g.open();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, first.command_id, "COMPLETED")
           && has_status(e.conn, d, second.command_id, "COMPLETED");
  }));
  EXPECT_EQ(scalar(e.conn,
                   "SELECT attempts::text FROM commandbus.command WHERE "
                   "domain = $1 AND command_id = $2::uuid",
                   d, second.command_id.to_string()),
            opt_str{"1"});
}

// -- WK-11: high concurrency (load) -------------------------------------------

TEST(WorkerLoad, HundredsOfBlockingHandlersRunAtOnceAndLoseNothing) {
  // 256 handler slots, 2,000 commands. Every handler blocks until all 256
  // slots are inside a handler at the same time (so blocking handlers truly
  // run in parallel and never stall each other), then the rest flows
  // through. Every command completes exactly once and the limit holds.
  env e;
  auto d = test::unique_name("wk");
  constexpr int concurrency = 256;
  constexpr int total = 2000;
  std::vector<send_request> reqs;
  for (int i = 0; i < total; ++i)
    reqs.push_back(make_req(d, "Load"));
  e.bus.send_batch(reqs);
  gate all_in;
  concurrency_probe probe;
  std::atomic<int> runs{0};
  handler_registry reg;
  reg.add(d, "Load", [&](const command&, handler_context&) -> json {
    if (probe.enter() == concurrency)
      all_in.open();
    all_in.wait(30s);
    probe.leave();
    ++runs;
    return json::null();
  });
  auto cfg = make_cfg({d}, concurrency);
  cfg.visibility_timeout = 60s;
  cfg.statement_timeout = 10s;
  worker w{cfg, std::move(reg)};
  finally cleanup{[&] {
    all_in.open();
    stop_worker(w);
  }};
  w.start();
  ASSERT_TRUE(eventually([&] { return probe.max() == concurrency; }, 60s))
    << "at most " << probe.max() << " handlers ran at once";
  ASSERT_TRUE(eventually([&] { return w.stats().completed == total; }, 120s))
    << w.stats().completed << " of " << total << " completed";
  stop_worker(w);
  EXPECT_EQ(probe.max(), concurrency);
  EXPECT_EQ(runs.load(), total);
  EXPECT_EQ(scalar(e.conn,
                   "SELECT count(*)::text FROM commandbus.command WHERE "
                   "domain = $1 AND status = 'COMPLETED' AND attempts = 1",
                   d),
            opt_str{std::to_string(total)});
  EXPECT_EQ(scalar(e.conn,
                   "SELECT count(*)::text FROM commandbus.audit WHERE domain "
                   "= $1 AND event_type = 'COMPLETED'",
                   d),
            opt_str{std::to_string(total)});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
}

// -- WK-3: the handler's command and context ---------------------------------

TEST(WorkerRun, HandlerGetsCommandAndContext) {
  env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto req = make_req(d, "DebitAccount", R"({"amount":100,"currency":"EUR"})");
  req.correlation_id = uuid::random();
  req.reply_to = reply_q;
  req.max_attempts = 5;
  auto sent = e.bus.send(req);
  std::mutex mtx;
  std::optional<command> seen;
  int attempt = 0, max_attempts = 0;
  int64_t msg_id = 0;
  bool cancelled = true;
  handler_registry reg;
  reg.add(d, "DebitAccount", [&](const command& cmd, handler_context& ctx) {
    std::lock_guard<std::mutex> guard{mtx};
    seen = cmd;
    attempt = ctx.attempt();
    max_attempts = ctx.max_attempts();
    msg_id = ctx.msg_id();
    cancelled = ctx.cancelled();
    // ctx.cmd() is the same command.
    EXPECT_EQ(ctx.cmd(), cmd);
    return obj(R"({"ok":true})");
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  stop_worker(w);
  std::lock_guard<std::mutex> guard{mtx};
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->domain, d);
  EXPECT_EQ(seen->command_type, "DebitAccount");
  EXPECT_EQ(seen->command_id, req.command_id);
  EXPECT_TRUE(jeq(e.conn, seen->data.text(), "{}",
                  R"({"amount":100,"currency":"EUR"})"))
    << seen->data.text();
  EXPECT_EQ(seen->correlation_id, req.correlation_id);
  EXPECT_EQ(seen->reply_to, opt_str{reply_q});
  EXPECT_EQ(attempt, 1);
  EXPECT_EQ(max_attempts, 5);
  EXPECT_EQ(msg_id, sent.msg_id);
  EXPECT_EQ(column(e.conn, d, sent.command_id, "msg_id"),
            opt_str{std::to_string(msg_id)});
  EXPECT_FALSE(cancelled);
}

// -- WK-4, WK-8: success -----------------------------------------------------

TEST(WorkerRun, SuccessDeletesMessageCompletesAuditsAndReplies) {
  env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto with_reply = make_req(d, "Ok", R"({"n":1})");
  with_reply.reply_to = reply_q;
  with_reply.correlation_id = uuid::random();
  auto r1 = e.bus.send(with_reply);
  auto r2 = e.bus.send(make_req(d, "Ok", R"({"n":2})")); // no reply_to
  handler_registry reg;
  reg.add(d, "Ok", [](const command& cmd, handler_context&) {
    return obj(R"({"balance":42,"echo":)" + cmd.data.text() + "}");
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, r1.command_id, "COMPLETED")
           && has_status(e.conn, d, r2.command_id, "COMPLETED");
  }));
  stop_worker(w);
  // The messages are deleted, not archived.
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  EXPECT_EQ(archive_rows(e.conn, queue_of(d)), 0);
  EXPECT_EQ(events(e.conn, d, r1.command_id),
            (strings{"SENT", "RECEIVED", "COMPLETED"}));
  EXPECT_EQ(events(e.conn, d, r2.command_id),
            (strings{"SENT", "RECEIVED", "COMPLETED"}));
  EXPECT_EQ(audit_detail(e.conn, d, r1.command_id, "COMPLETED", "{msg_id}"),
            opt_str{std::to_string(r1.msg_id)});
  EXPECT_EQ(audit_detail(e.conn, d, r1.command_id, "COMPLETED", "{reply_to}"),
            opt_str{reply_q});
  EXPECT_EQ(
    audit_detail(e.conn, d, r1.command_id, "COMPLETED", "{has_result}"),
    opt_str{"true"});
  EXPECT_EQ(audit_detail(e.conn, d, r2.command_id, "COMPLETED", "{reply_to}"),
            std::nullopt);
  // Exactly one reply: the command without reply_to gets none.
  auto replies = messages(e.conn, reply_q);
  ASSERT_EQ(replies.size(), 1u);
  auto& rep = replies[0];
  EXPECT_EQ(jget(e.conn, rep, "{command_id}"),
            opt_str{r1.command_id.to_string()});
  EXPECT_EQ(jget(e.conn, rep, "{correlation_id}"),
            opt_str{with_reply.correlation_id->to_string()});
  EXPECT_EQ(jget(e.conn, rep, "{outcome}"), opt_str{"SUCCESS"});
  EXPECT_TRUE(jeq(e.conn, rep, "{result}", R"({"balance":42,"echo":{"n":1}})"))
    << rep;
  auto s = w.stats();
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.received, 2);
  EXPECT_EQ(s.in_flight, 0);
}

TEST(WorkerRun, SuccessWithNullResultRepliesWithNullResult) {
  env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto req = make_req(d, "Ok");
  req.reply_to = reply_q;
  auto sent = e.bus.send(req);
  handler_registry reg;
  reg.add(d, "Ok", [](const command&, handler_context&) { return json::null(); });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  stop_worker(w);
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "COMPLETED", "{has_result}"),
    opt_str{"false"});
  auto replies = messages(e.conn, reply_q);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(jget(e.conn, replies[0], "{outcome}"), opt_str{"SUCCESS"});
  EXPECT_TRUE(jhas(e.conn, replies[0], "result")) << replies[0];
  EXPECT_EQ(jget(e.conn, replies[0], "{result}"), std::nullopt);
  // The bus generated a correlation id; the reply carries it.
  EXPECT_EQ(jget(e.conn, replies[0], "{correlation_id}"),
            column(e.conn, d, sent.command_id, "correlation_id"));
}

// -- WK-5: transient failures ------------------------------------------------

TEST(WorkerRetry, TransientFailureIsRetriedWithBackoffThenSucceeds) {
  env e;
  auto d = test::unique_name("wk");
  auto sent = e.bus.send(make_req(d, "Flaky"));
  std::mutex mtx;
  std::vector<int> attempts;
  handler_registry reg;
  reg.add(d, "Flaky", [&](const command&, handler_context& ctx) -> json {
    {
      std::lock_guard<std::mutex> guard{mtx};
      attempts.push_back(ctx.attempt());
    }
    if (ctx.attempt() == 1)
      throw transient_command_error("TIMEOUT", "downstream timed out");
    return obj(R"({"ok":1})");
  });
  auto cfg = make_cfg({d});
  cfg.retry.backoff_seconds = {2};
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return count_events(e.conn, d, sent.command_id, "FAILED") == 1; }));
  // While waiting for the backoff: still IN_PROGRESS, error recorded, the
  // message hidden for about the backoff.
  EXPECT_EQ(status_of(e.conn, d, sent.command_id), opt_str{"IN_PROGRESS"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"TRANSIENT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"TIMEOUT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_msg"),
            opt_str{"downstream timed out"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "FAILED", "{error_type}"),
            opt_str{"TRANSIENT"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "FAILED", "{error_code}"),
            opt_str{"TIMEOUT"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "FAILED", "{attempt}"),
            opt_str{"1"});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "FAILED", "{max_attempts}"),
    opt_str{"3"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 1);
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  stop_worker(w);
  EXPECT_EQ(attempts_of(e.conn, d, sent.command_id), 2);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "FAILED", "RECEIVED", "COMPLETED"}));
  // The second delivery came after the backoff (>= ~2 s after the failure).
  auto gap = scalar(
    e.conn,
    "SELECT extract(epoch FROM (SELECT ts FROM commandbus.audit WHERE domain "
    "= $1 AND command_id = $2::uuid AND event_type = 'RECEIVED' ORDER BY ts "
    "DESC LIMIT 1) - (SELECT ts FROM commandbus.audit WHERE domain = $1 AND "
    "command_id = $2::uuid AND event_type = 'FAILED'))::text",
    d, sent.command_id.to_string());
  ASSERT_TRUE(gap.has_value());
  EXPECT_GE(std::stod(*gap), 1.5);
  std::lock_guard<std::mutex> guard{mtx};
  EXPECT_EQ(attempts, (std::vector<int>{1, 2}));
  EXPECT_EQ(w.stats().retried, 1);
  EXPECT_EQ(w.stats().received, 2);
}

namespace {

struct custom_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace

TEST(WorkerRetry, UnknownExceptionIsTransientWithTypeNameAsCode) {
  env e;
  auto d = test::unique_name("wk");
  auto std_err = e.bus.send(make_req(d, "Std"));
  auto custom = e.bus.send(make_req(d, "Custom"));
  handler_registry reg;
  reg.add(d, "Std", [](const command&, handler_context& ctx) -> json {
    if (ctx.attempt() == 1)
      throw std::runtime_error("boom");
    return json::null();
  });
  reg.add(d, "Custom", [](const command&, handler_context& ctx) -> json {
    if (ctx.attempt() == 1)
      throw custom_failure("custom boom");
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, std_err.command_id, "COMPLETED")
           && has_status(e.conn, d, custom.command_id, "COMPLETED");
  }));
  stop_worker(w);
  EXPECT_EQ(audit_detail(e.conn, d, std_err.command_id, "FAILED",
                         "{error_type}"),
            opt_str{"TRANSIENT"});
  EXPECT_EQ(audit_detail(e.conn, d, std_err.command_id, "FAILED",
                         "{error_code}"),
            opt_str{"runtime_error"});
  EXPECT_EQ(
    audit_detail(e.conn, d, std_err.command_id, "FAILED", "{error_msg}"),
    opt_str{"boom"});
  EXPECT_EQ(
    audit_detail(e.conn, d, custom.command_id, "FAILED", "{error_code}"),
    opt_str{"custom_failure"});
  EXPECT_EQ(events(e.conn, d, custom.command_id),
            (strings{"SENT", "RECEIVED", "FAILED", "RECEIVED", "COMPLETED"}));
  EXPECT_EQ(attempts_of(e.conn, d, std_err.command_id), 2);
}

TEST(WorkerRetry, MissingHandlerIsTransientHandlerNotFoundError) {
  env e;
  auto d = test::unique_name("wk");
  auto req = make_req(d, "Unregistered");
  req.max_attempts = 2;
  auto sent = e.bus.send(req);
  handler_registry reg;
  reg.add(d, "Other", [](const command&, handler_context&) { return json::null(); });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, sent.command_id, "IN_TROUBLESHOOTING_QUEUE");
  }));
  stop_worker(w);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "FAILED", "RECEIVED", "MOVED_TO_TSQ"}));
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "FAILED", "{error_code}"),
            opt_str{"HandlerNotFoundError"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"TRANSIENT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"HandlerNotFoundError"});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ", "{reason}"),
    opt_str{"EXHAUSTED"});
}

// -- WK-6: permanent failures ------------------------------------------------

TEST(WorkerFailure, PermanentFailureMovesToTsqAtOnceWithoutReply) {
  env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto req = make_req(d, "Bad");
  req.reply_to = reply_q;
  auto sent = e.bus.send(req);
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Bad", [&](const command&, handler_context&) -> json {
    ++calls;
    throw permanent_command_error("INVALID_ACCOUNT", "no such account",
                                  obj(R"({"account":"X-1","field":"iban"})"));
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, sent.command_id, "IN_TROUBLESHOOTING_QUEUE");
  }));
  stop_worker(w);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(attempts_of(e.conn, d, sent.command_id), 1);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"PERMANENT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"INVALID_ACCOUNT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_msg"),
            opt_str{"no such account"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ",
                         "{error_details,account}"),
            opt_str{"X-1"});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ", "{error_code}"),
    opt_str{"INVALID_ACCOUNT"});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ", "{msg_id}"),
    opt_str{std::to_string(sent.msg_id)});
  EXPECT_EQ(
    audit_detail(e.conn, d, sent.command_id, "MOVED_TO_TSQ", "{attempt}"),
    opt_str{"1"});
  // Archived (not deleted), no reply.
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  EXPECT_TRUE(archived(e.conn, queue_of(d), sent.msg_id));
  EXPECT_EQ(messages(e.conn, reply_q).size(), 0u);
  EXPECT_EQ(w.stats().moved_to_tsq, 1);
  EXPECT_EQ(w.stats().retried, 0);
}

// -- WK-7, D6: exhaustion by the command's own max_attempts ------------------

TEST(WorkerFailure, ExhaustionUsesTheCommandsMaxAttempts) {
  env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto two = make_req(d, "AlwaysFails");
  two.max_attempts = 2;
  two.reply_to = reply_q;
  auto four = make_req(d, "AlwaysFails");
  four.max_attempts = 4;
  four.reply_to = reply_q;
  auto s2 = e.bus.send(two);
  auto s4 = e.bus.send(four);
  std::mutex mtx;
  std::map<std::string, int> calls;
  handler_registry reg;
  reg.add(d, "AlwaysFails", [&](const command& cmd, handler_context&) -> json {
    {
      std::lock_guard<std::mutex> guard{mtx};
      calls[cmd.command_id.to_string()] += 1;
    }
    throw transient_command_error("UNAVAILABLE", "still down");
  });
  // The worker's policy says 3: neither command may follow it (D6).
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, s2.command_id, "IN_TROUBLESHOOTING_QUEUE")
           && has_status(e.conn, d, s4.command_id, "IN_TROUBLESHOOTING_QUEUE");
  }));
  stop_worker(w);
  for (auto [sent, max] : {std::make_pair(s2, 2), std::make_pair(s4, 4)}) {
    SCOPED_TRACE("max_attempts " + std::to_string(max));
    auto id = sent.command_id;
    EXPECT_EQ(attempts_of(e.conn, d, id), max);
    strings expected{"SENT"};
    for (int i = 1; i < max; ++i) {
      expected.push_back("RECEIVED");
      expected.push_back("FAILED");
    }
    expected.push_back("RECEIVED");
    expected.push_back("MOVED_TO_TSQ");
    EXPECT_EQ(events(e.conn, d, id), expected);
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{reason}"),
              opt_str{"EXHAUSTED"});
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{attempt}"),
              opt_str{std::to_string(max)});
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{max_attempts}"),
              opt_str{std::to_string(max)});
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{error_type}"),
              opt_str{"TRANSIENT"});
    EXPECT_EQ(audit_detail(e.conn, d, id, "MOVED_TO_TSQ", "{error_code}"),
              opt_str{"UNAVAILABLE"});
    EXPECT_EQ(column(e.conn, d, id, "last_error_type"), opt_str{"TRANSIENT"});
    EXPECT_EQ(column(e.conn, d, id, "last_error_code"), opt_str{"UNAVAILABLE"});
    EXPECT_TRUE(archived(e.conn, queue_of(d), sent.msg_id));
    std::lock_guard<std::mutex> guard{mtx};
    EXPECT_EQ(calls[id.to_string()], max);
  }
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  // No reply on exhaustion.
  EXPECT_EQ(messages(e.conn, reply_q).size(), 0u);
  auto s = w.stats();
  EXPECT_EQ(s.moved_to_tsq, 2);
  EXPECT_EQ(s.retried, 1 + 3);
}

// -- business rule (D5) ------------------------------------------------------

TEST(WorkerFailure, BusinessRuleFailsArchivesAndRepliesFailed) {
  env e;
  auto d = test::unique_name("wk");
  auto reply_q = d + "__replies";
  auto req = make_req(d, "Rule");
  req.reply_to = reply_q;
  req.correlation_id = uuid::random();
  auto sent = e.bus.send(req);
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Rule", [&](const command&, handler_context&) -> json {
    ++calls;
    throw business_rule_error("ACCOUNT_CLOSED", "account closed",
                              obj(R"({"account":"A-1","closed_on":"2024-01-01"})"));
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "FAILED"); }));
  stop_worker(w);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "BUSINESS_RULE_FAILED"}));
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"BUSINESS_RULE"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"ACCOUNT_CLOSED"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_msg"),
            opt_str{"account closed"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "BUSINESS_RULE_FAILED",
                         "{error_details,account}"),
            opt_str{"A-1"});
  EXPECT_EQ(audit_detail(e.conn, d, sent.command_id, "BUSINESS_RULE_FAILED",
                         "{error_code}"),
            opt_str{"ACCOUNT_CLOSED"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  EXPECT_TRUE(archived(e.conn, queue_of(d), sent.msg_id));
  auto replies = messages(e.conn, reply_q);
  ASSERT_EQ(replies.size(), 1u);
  auto& rep = replies[0];
  EXPECT_EQ(jget(e.conn, rep, "{outcome}"), opt_str{"FAILED"});
  EXPECT_EQ(jget(e.conn, rep, "{command_id}"),
            opt_str{sent.command_id.to_string()});
  EXPECT_EQ(jget(e.conn, rep, "{correlation_id}"),
            opt_str{req.correlation_id->to_string()});
  EXPECT_EQ(jget(e.conn, rep, "{error_code}"), opt_str{"ACCOUNT_CLOSED"});
  EXPECT_EQ(jget(e.conn, rep, "{error_message}"), opt_str{"account closed"});
  EXPECT_EQ(jget(e.conn, rep, "{result,error_code}"), opt_str{"ACCOUNT_CLOSED"});
  EXPECT_EQ(jget(e.conn, rep, "{result,error_message}"),
            opt_str{"account closed"});
  EXPECT_TRUE(jeq(e.conn, rep, "{result,error_details}",
                  R"({"account":"A-1","closed_on":"2024-01-01"})"))
    << rep;
  EXPECT_EQ(w.stats().failed, 1);
}

// -- handler modes -----------------------------------------------------------

TEST(WorkerModes, NonBlockingHandlersRunBesideBlockingOnesWithTheSameOutcomes) {
  env e;
  auto d = test::unique_name("wk");
  std::vector<uuid> fast, slow;
  for (int i = 0; i < 20; ++i) {
    fast.push_back(e.bus.send(make_req(d, "Fast", R"({"n":7})")).command_id);
    slow.push_back(e.bus.send(make_req(d, "Slow")).command_id);
  }
  auto rule = e.bus.send(make_req(d, "Rule"));
  auto extend = e.bus.send(make_req(d, "Extend"));
  std::mutex mtx;
  std::set<std::thread::id> fast_threads, slow_threads;
  auto note = [&](std::set<std::thread::id>& into) {
    std::lock_guard<std::mutex> guard{mtx};
    into.insert(std::this_thread::get_id());
  };
  std::atomic<bool> extend_failed{false};
  handler_registry reg;
  reg.add(
      d, "Fast",
      [&](const command& cmd, handler_context&) -> json {
        note(fast_threads);
        return cmd.data;
      },
      handler_mode::non_blocking);
  reg.add(
      d, "Rule",
      [&](const command&, handler_context&) -> json {
        throw business_rule_error("LIMIT", "over the limit");
      },
      handler_mode::non_blocking);
  reg.add(
      d, "Extend",
      [&](const command&, handler_context& ctx) -> json {
        try {
          ctx.extend_visibility(120s);
        } catch (const std::exception&) {
          extend_failed = true;
        }
        return json::null();
      },
      handler_mode::non_blocking);
  reg.add(d, "Slow", [&](const command&, handler_context&) -> json {
    note(slow_threads);
    std::this_thread::sleep_for(1ms); // a blocking handler may block
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return e.conn.query("SELECT count(*) FROM commandbus.command WHERE domain "
                        "= $1 AND status = 'COMPLETED'",
                        d)
                   .int64(0, 0)
               == 41
           && has_status(e.conn, d, rule.command_id, "FAILED");
  }));
  stop_worker(w);
  for (auto& id : fast) {
    EXPECT_EQ(events(e.conn, d, id),
              (strings{"SENT", "RECEIVED", "COMPLETED"}));
  }
  EXPECT_EQ(events(e.conn, d, rule.command_id),
            (strings{"SENT", "RECEIVED", "BUSINESS_RULE_FAILED"}));
  EXPECT_TRUE(has_status(e.conn, d, extend.command_id, "COMPLETED"));
  EXPECT_FALSE(extend_failed.load());
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  // Blocking handlers have threads of their own, never the scheduler
  // threads that ran the non-blocking ones.
  std::lock_guard<std::mutex> guard{mtx};
  EXPECT_FALSE(fast_threads.empty());
  EXPECT_FALSE(slow_threads.empty());
  for (auto& t : fast_threads)
    EXPECT_EQ(slow_threads.count(t), 0u);
}

// -- WK-9: graceful shutdown -------------------------------------------------

TEST(WorkerShutdown, StopWaitsForInFlightHandler) {
  env e;
  auto d = test::unique_name("wk");
  auto sent = e.bus.send(make_req(d, "Slow"));
  gate entered, release;
  std::atomic<bool> saw_cancel{false};
  handler_registry reg;
  reg.add(d, "Slow", [&](const command&, handler_context& ctx) -> json {
    entered.open();
    release.wait();
    saw_cancel = ctx.cancelled();
    return obj(R"({"slow":true})");
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally cleanup{[&] {
    release.open();
    stop_worker(w);
  }};
  w.start();
  ASSERT_TRUE(entered.wait(20s));
  EXPECT_EQ(w.in_flight_count(), 1u);
  auto fut = w.stop(10s);
  // stop() must not return while the handler runs.
  EXPECT_EQ(fut.wait_for(300ms), std::future_status::timeout);
  release.open();
  ASSERT_EQ(fut.wait_for(15s), std::future_status::ready);
  fut.get();
  EXPECT_FALSE(w.is_running());
  EXPECT_TRUE(saw_cancel.load()); // the handler could see the shutdown
  // Completed (and committed) before stop returned.
  EXPECT_EQ(status_of(e.conn, d, sent.command_id), opt_str{"COMPLETED"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
  EXPECT_EQ(w.stats().completed, 1);
  EXPECT_EQ(w.in_flight_count(), 0u);
}

TEST(WorkerShutdown, StopWithShortTimeoutReturnsAndCommandIsRedelivered) {
  env e;
  auto d = test::unique_name("wk");
  auto sent = e.bus.send(make_req(d, "Stuck"));
  gate entered, release;
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Stuck", [&](const command&, handler_context& ctx) -> json {
    if (++calls == 1 && ctx.attempt() == 1) {
      entered.open();
      // Blocked and not cooperating with cancellation.
      release.wait(8s);
      throw transient_command_error("ABANDONED", "should not be recorded");
    }
    return obj(R"({"second":true})");
  });
  auto cfg = make_cfg({d});
  cfg.visibility_timeout = 2s;
  cfg.statement_timeout = 1s;
  worker w{cfg, std::move(reg)};
  finally cleanup{[&] {
    release.open();
    stop_worker(w);
  }};
  w.start();
  ASSERT_TRUE(entered.wait(20s));
  auto t0 = std::chrono::steady_clock::now();
  auto fut = w.stop(200ms);
  // The timeout passed long before: stop must have returned, abandoning the
  // blocked handler (worker.hpp: "Commands still running at the timeout are
  // abandoned").
  auto st = fut.wait_for(3s);
  EXPECT_EQ(st, std::future_status::ready)
    << "stop(200ms) did not return within 3 s while a handler was blocked";
  release.open();
  fut.get();
  auto stop_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - t0)
                   .count();
  RecordProperty("stop_ms", static_cast<int>(stop_ms));
  EXPECT_FALSE(w.is_running());
  // The abandoned run left no outcome: still IN_PROGRESS, message kept.
  EXPECT_EQ(status_of(e.conn, d, sent.command_id), opt_str{"IN_PROGRESS"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 1);
  EXPECT_EQ(count_events(e.conn, d, sent.command_id, "FAILED"), 0);
  // A new worker gets it again after the visibility timeout.
  handler_registry reg2;
  reg2.add(d, "Stuck", [&](const command&, handler_context& ctx) -> json {
    ++calls;
    EXPECT_EQ(ctx.attempt(), 2);
    return obj(R"({"second":true})");
  });
  worker w2{cfg, std::move(reg2)};
  finally stop2{[&] { stop_worker(w2); }};
  w2.start();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  stop_worker(w2);
  EXPECT_EQ(attempts_of(e.conn, d, sent.command_id), 2);
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "RECEIVED", "COMPLETED"}));
}

// -- S004, D7: visibility ----------------------------------------------------

TEST(WorkerVisibility, ExtendVisibilityMovesVt) {
  env e;
  auto d = test::unique_name("wk");
  auto sent = e.bus.send(make_req(d, "Long"));
  gate extended, release;
  std::atomic<bool> extend_failed{false};
  handler_registry reg;
  reg.add(d, "Long", [&](const command&, handler_context& ctx) -> json {
    try {
      ctx.extend_visibility(120s);
    } catch (const std::exception&) {
      extend_failed = true;
    }
    extended.open();
    release.wait();
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally cleanup{[&] {
    release.open();
    stop_worker(w, 3s);
  }};
  w.start();
  ASSERT_TRUE(extended.wait(20s));
  EXPECT_FALSE(extend_failed.load());
  // vt was now + 5 s (visibility_timeout); now it is about now + 120 s.
  EXPECT_TRUE(vt_beyond(e.conn, queue_of(d), sent.msg_id, "60 seconds"));
  release.open();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
}

TEST(WorkerVisibility, HeartbeatDoesNotShortenAnExplicitExtension) {
  env e;
  auto d = test::unique_name("wk");
  auto sent = e.bus.send(make_req(d, "Long"));
  gate extended, release;
  handler_registry reg;
  reg.add(d, "Long", [&](const command&, handler_context& ctx) -> json {
    ctx.extend_visibility(120s);
    extended.open();
    release.wait(15s);
    return json::null();
  });
  auto cfg = make_cfg({d});
  cfg.visibility_timeout = 2s; // heartbeat every 1 s for runs >= 1 s
  cfg.statement_timeout = 1s;
  worker w{cfg, std::move(reg)};
  finally cleanup{[&] {
    release.open();
    stop_worker(w, 3s);
  }};
  w.start();
  ASSERT_TRUE(extended.wait(20s));
  ASSERT_TRUE(vt_beyond(e.conn, queue_of(d), sent.msg_id, "60 seconds"));
  // The lease heartbeat must keep the message hidden, never bring the
  // handler's explicit 120 s lease back to the 2 s visibility timeout.
  EXPECT_FALSE(eventually(
    [&] { return !vt_beyond(e.conn, queue_of(d), sent.msg_id, "60 seconds"); },
    3s))
    << "the heartbeat reset vt to about now() + visibility_timeout";
  release.open();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
}

TEST(WorkerVisibility, HeartbeatKeepsALongHandlerFromBeingRedelivered) {
  env e;
  auto d = test::unique_name("wk");
  auto sent = e.bus.send(make_req(d, "Long"));
  gate release;
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Long", [&](const command&, handler_context&) -> json {
    ++calls;
    release.wait(15s);
    return json::null();
  });
  auto cfg = make_cfg({d}, 2);
  cfg.visibility_timeout = 2s;
  cfg.statement_timeout = 1s;
  worker w{cfg, std::move(reg)};
  finally cleanup{[&] {
    release.open();
    stop_worker(w);
  }};
  w.start();
  ASSERT_TRUE(eventually([&] { return calls.load() == 1; }));
  // Well past the 2 s visibility timeout: no second delivery.
  EXPECT_FALSE(eventually([&] { return calls.load() > 1; }, 4500ms));
  EXPECT_EQ(attempts_of(e.conn, d, sent.command_id), 1);
  release.open();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  EXPECT_EQ(calls.load(), 1);
}

// -- S004, D9: receive guard -------------------------------------------------

TEST(WorkerReceive, TerminalUnknownAndInvalidMessagesAreArchived) {
  env e;
  auto d = test::unique_name("wk");
  auto q = queue_of(d);
  auto done = e.bus.send(make_req(d, "Ok"));
  // Simulate a command that completed while its message stayed behind.
  e.conn.query("UPDATE commandbus.command SET status = 'COMPLETED' WHERE "
               "domain = $1 AND command_id = $2::uuid",
               d, done.command_id.to_string());
  int64_t raw_no_id = std::stoll(*scalar(
    e.conn, "SELECT pgmq.send($1, '{\"foo\":1}'::jsonb)::text", q));
  int64_t raw_array = std::stoll(
    *scalar(e.conn, "SELECT pgmq.send($1, '[1,2]'::jsonb)::text", q));
  auto unknown_id = uuid::random();
  int64_t raw_unknown = std::stoll(*scalar(
    e.conn,
    "SELECT pgmq.send($1, jsonb_build_object('domain', $2::text, "
    "'command_type', 'Ok', 'command_id', $3::text, 'data', '{}'::jsonb))::text",
    q, d, unknown_id.to_string()));
  auto good = e.bus.send(make_req(d, "Ok"));
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Ok", [&](const command&, handler_context&) -> json {
    ++calls;
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, good.command_id, "COMPLETED")
           && queue_rows(e.conn, q) == 0;
  }));
  EXPECT_TRUE(eventually([&] { return w.stats().rejected == 4; }))
    << "rejected = " << w.stats().rejected;
  stop_worker(w);
  EXPECT_EQ(calls.load(), 1); // only the good command ran
  for (int64_t id : std::vector<int64_t>{done.msg_id, raw_no_id, raw_array,
                                        raw_unknown})
    EXPECT_TRUE(archived(e.conn, q, id)) << "msg_id " << id;
  // The terminal command: untouched, RECEIVE_SKIPPED audit.
  EXPECT_EQ(status_of(e.conn, d, done.command_id), opt_str{"COMPLETED"});
  EXPECT_EQ(attempts_of(e.conn, d, done.command_id), 0);
  EXPECT_EQ(events(e.conn, d, done.command_id),
            (strings{"SENT", "RECEIVE_SKIPPED"}));
  EXPECT_EQ(
    audit_detail(e.conn, d, done.command_id, "RECEIVE_SKIPPED", "{reason}"),
    opt_str{"TERMINAL_STATUS"});
  EXPECT_EQ(
    audit_detail(e.conn, d, done.command_id, "RECEIVE_SKIPPED", "{status}"),
    opt_str{"COMPLETED"});
  EXPECT_EQ(
    audit_detail(e.conn, d, done.command_id, "RECEIVE_SKIPPED", "{msg_id}"),
    opt_str{std::to_string(done.msg_id)});
  EXPECT_EQ(
    audit_detail(e.conn, d, unknown_id, "RECEIVE_SKIPPED", "{reason}"),
    opt_str{"UNKNOWN_COMMAND"});
  EXPECT_EQ(w.stats().completed, 1);
}

TEST(WorkerReceive, UndecodableClaimedMessageGoesToTsq) {
  env e;
  auto d = test::unique_name("wk");
  auto q = queue_of(d);
  auto sent = e.bus.send(make_req(d, "Ok"));
  // The command row is fine, its message lost a required field.
  db::validate_queue_name(q);
  e.conn.query("UPDATE pgmq.q_" + q
                 + " SET message = message - 'command_type' WHERE msg_id = $1",
               static_cast<long long>(sent.msg_id));
  std::atomic<int> calls{0};
  handler_registry reg;
  reg.add(d, "Ok", [&](const command&, handler_context&) -> json {
    ++calls;
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, d, sent.command_id, "IN_TROUBLESHOOTING_QUEUE");
  }));
  stop_worker(w);
  EXPECT_EQ(calls.load(), 0);
  EXPECT_TRUE(archived(e.conn, q, sent.msg_id));
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_type"),
            opt_str{"PERMANENT"});
  EXPECT_EQ(column(e.conn, d, sent.command_id, "last_error_code"),
            opt_str{"INVALID_MESSAGE"});
  EXPECT_EQ(events(e.conn, d, sent.command_id),
            (strings{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
  EXPECT_EQ(w.in_flight_count(), 0u);
}

// -- wake-up: NOTIFY and polling ---------------------------------------------

TEST(WorkerWakeup, NotifyWakesAnIdleWorkerLongBeforeThePollInterval) {
  env e;
  auto d = test::unique_name("wk");
  handler_registry reg;
  reg.add(d, "Ok", [](const command&, handler_context&) { return json::null(); });
  auto cfg = make_cfg({d});
  cfg.poll_interval = 60s;
  cfg.use_notify = true;
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  auto channel = db::notify_channel(queue_of(d));
  ASSERT_TRUE(eventually([&] {
    return scalar(e.conn,
                  "SELECT count(*)::text FROM pg_stat_activity WHERE "
                  "application_name = 'cmdbus-listener' AND query ILIKE '%' "
                  "|| $1 || '%'",
                  channel)
           == opt_str{"1"};
  }));
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("command " + std::to_string(i + 1));
    auto t0 = std::chrono::steady_clock::now();
    auto sent = e.bus.send(make_req(d, "Ok"));
    EXPECT_TRUE(eventually(
      [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); },
      5s));
    RecordProperty("notify_ms_" + std::to_string(i),
                   static_cast<int>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - t0)
                       .count()));
  }
}

TEST(WorkerWakeup, PollingFallbackWithoutNotify) {
  env e;
  auto d = test::unique_name("wk");
  handler_registry reg;
  reg.add(d, "Ok", [](const command&, handler_context&) { return json::null(); });
  auto cfg = make_cfg({d});
  cfg.poll_interval = 200ms;
  cfg.use_notify = false;
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  // Let it go idle first, then send.
  auto first = e.bus.send(make_req(d, "Ok"));
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, first.command_id, "COMPLETED"); }, 5s));
  auto second = e.bus.send(make_req(d, "Ok"));
  EXPECT_TRUE(eventually(
    [&] { return has_status(e.conn, d, second.command_id, "COMPLETED"); },
    5s));
  EXPECT_EQ(scalar(e.conn,
                   "SELECT count(*)::text FROM pg_stat_activity WHERE "
                   "application_name = 'cmdbus-listener' AND query ILIKE '%' "
                   "|| $1 || '%'",
                   db::notify_channel(queue_of(d))),
            opt_str{"0"});
}

// -- multi-domain --------------------------------------------------------------

TEST(WorkerRun, OneWorkerServesSeveralDomains) {
  env e;
  auto a = test::unique_name("wk");
  auto b = test::unique_name("wk");
  auto sa = e.bus.send(make_req(a, "Ok"));
  auto sb = e.bus.send(make_req(b, "Ok"));
  std::mutex mtx;
  strings seen;
  handler_registry reg;
  auto fn = [&](const command& cmd, handler_context&) -> json {
    std::lock_guard<std::mutex> guard{mtx};
    seen.push_back(cmd.domain);
    return json::null();
  };
  reg.add(a, "Ok", fn);
  reg.add(b, "Ok", fn);
  worker w{make_cfg({a, b}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  EXPECT_EQ(w.domain(), a);
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, a, sa.command_id, "COMPLETED")
           && has_status(e.conn, b, sb.command_id, "COMPLETED");
  }));
  // Commands sent while running, to both domains.
  auto sa2 = e.bus.send(make_req(a, "Ok"));
  auto sb2 = e.bus.send(make_req(b, "Ok"));
  ASSERT_TRUE(eventually([&] {
    return has_status(e.conn, a, sa2.command_id, "COMPLETED")
           && has_status(e.conn, b, sb2.command_id, "COMPLETED");
  }));
  stop_worker(w);
  std::lock_guard<std::mutex> guard{mtx};
  EXPECT_EQ(std::count(seen.begin(), seen.end(), a), 2);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), b), 2);
  EXPECT_EQ(w.stats().completed, 4);
}

// -- tick mode ----------------------------------------------------------------

TEST(WorkerTick, RunTickProcessesEverythingDueAndStops) {
  env e;
  auto d = test::unique_name("wk");
  auto ok = e.bus.send(make_req(d, "Ok"));
  auto flaky = e.bus.send(make_req(d, "Flaky"));
  auto bad = e.bus.send(make_req(d, "Bad"));
  handler_registry reg;
  reg.add(d, "Ok", [](const command&, handler_context&) { return json::null(); });
  reg.add(d, "Flaky", [](const command&, handler_context& ctx) -> json {
    if (ctx.attempt() == 1)
      throw transient_command_error("RETRY", "try again");
    return json::null();
  });
  reg.add(d, "Bad", [](const command&, handler_context&) -> json {
    throw permanent_command_error("BAD", "bad");
  });
  auto cfg = make_cfg({d});
  cfg.retry.backoff_seconds = {0};
  worker w{cfg, std::move(reg)};
  auto t0 = std::chrono::steady_clock::now();
  auto s = w.run_tick(20s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
  EXPECT_FALSE(w.is_running());
  EXPECT_EQ(status_of(e.conn, d, ok.command_id), opt_str{"COMPLETED"});
  EXPECT_EQ(status_of(e.conn, d, flaky.command_id), opt_str{"COMPLETED"});
  EXPECT_EQ(status_of(e.conn, d, bad.command_id),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  EXPECT_EQ(s.received, 4);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.retried, 1);
  EXPECT_EQ(s.moved_to_tsq, 1);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.rejected, 0);
  EXPECT_EQ(s.in_flight, 0);
  // Nothing runs after the tick.
  auto later = e.bus.send(make_req(d, "Ok"));
  EXPECT_FALSE(eventually(
    [&] { return !has_status(e.conn, d, later.command_id, "PENDING"); },
    500ms));
}

TEST(WorkerTick, TransientRetryFinishingLastIsStillProcessedInTheTick) {
  // The retry of a backoff-0 transient failure is due at once, so the tick
  // must run it even when that failure is the last work in flight after the
  // poller already found the queue empty once.
  env e;
  auto d = test::unique_name("wk");
  auto fast = e.bus.send(make_req(d, "Ok"));
  auto slow = e.bus.send(make_req(d, "SlowFlaky"));
  worker* self = nullptr;
  handler_registry reg;
  reg.add(d, "Ok", [](const command&, handler_context&) { return json::null(); });
  reg.add(d, "SlowFlaky", [&](const command&, handler_context& ctx) -> json {
    if (ctx.attempt() == 1) {
      // Fail only after the other command is fully finished (its slot
      // released and the poller re-read the queue).
      eventually([&] { return self->stats().completed == 1; }, 10s);
      std::this_thread::sleep_for(300ms);
      throw transient_command_error("RETRY", "try again");
    }
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  self = &w;
  auto s = w.run_tick(20s);
  EXPECT_EQ(status_of(e.conn, d, fast.command_id), opt_str{"COMPLETED"});
  EXPECT_EQ(status_of(e.conn, d, slow.command_id), opt_str{"COMPLETED"})
    << "attempts " << attempts_of(e.conn, d, slow.command_id);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.retried, 1);
}

// -- batches ------------------------------------------------------------------

TEST(WorkerBatch, CallbackFiresOnceWhenBatchCompletes) {
  env e;
  auto d = test::unique_name("wk");
  auto mk = [](const std::string& type) {
    batch_command c;
    c.command_type = type;
    c.command_id = uuid::random();
    return c;
  };
  auto ok_batch = e.bus.create_batch(d, {mk("Ok"), mk("Ok"), mk("Ok")});
  auto mixed_batch = e.bus.create_batch(d, {mk("Ok"), mk("Rule"), mk("Ok")});
  std::mutex mtx;
  std::vector<std::pair<std::string, uuid>> fired;
  handler_registry reg;
  reg.add(d, "Ok", [](const command&, handler_context&) { return json::null(); });
  reg.add(d, "Rule", [](const command&, handler_context&) -> json {
    throw business_rule_error("NO", "not allowed");
  });
  worker w{make_cfg({d}), std::move(reg)};
  w.on_batch_complete([&](const std::string& domain, const uuid& id) {
    std::lock_guard<std::mutex> guard{mtx};
    fired.emplace_back(domain, id);
  });
  finally stop{[&] { stop_worker(w); }};
  w.start();
  EXPECT_THROW(w.on_batch_complete([](const std::string&, const uuid&) {}),
               std::logic_error);
  auto batch_col = [&](const uuid& id, const std::string& col) {
    return scalar(e.conn,
                  "SELECT " + col
                    + "::text FROM commandbus.batch WHERE domain = $1 AND "
                      "batch_id = $2::uuid",
                  d, id.to_string());
  };
  auto fired_count = [&] {
    std::lock_guard<std::mutex> guard{mtx};
    return fired.size();
  };
  ASSERT_TRUE(eventually([&] {
    return batch_col(ok_batch.batch_id, "status") == opt_str{"COMPLETED"}
           && batch_col(mixed_batch.batch_id, "status")
                == opt_str{"COMPLETED_WITH_FAILURES"}
           && fired_count() >= 2;
  })) << "batch statuses " << batch_col(ok_batch.batch_id, "status").value_or("?")
      << ", " << batch_col(mixed_batch.batch_id, "status").value_or("?")
      << "; callbacks " << fired_count();
  stop_worker(w);
  EXPECT_EQ(batch_col(ok_batch.batch_id, "completed_count"), opt_str{"3"});
  EXPECT_EQ(batch_col(ok_batch.batch_id, "failed_count"), opt_str{"0"});
  EXPECT_EQ(batch_col(mixed_batch.batch_id, "completed_count"), opt_str{"2"});
  EXPECT_EQ(batch_col(mixed_batch.batch_id, "failed_count"), opt_str{"1"});
  EXPECT_EQ(batch_col(mixed_batch.batch_id, "in_troubleshooting_count"),
            opt_str{"0"});
  std::lock_guard<std::mutex> guard{mtx};
  ASSERT_EQ(fired.size(), 2u);
  auto times = [&](const uuid& id) {
    return std::count_if(fired.begin(), fired.end(),
                         [&](auto& x) { return x.second == id; });
  };
  EXPECT_EQ(times(ok_batch.batch_id), 1);
  EXPECT_EQ(times(mixed_batch.batch_id), 1);
  for (auto& x : fired)
    EXPECT_EQ(x.first, d);
}

// -- registration and configuration --------------------------------------------

TEST(WorkerRegistry, DuplicateHandlerRegistrationThrows) {
  handler_registry reg;
  auto fn = [](const command&, handler_context&) { return json::null(); };
  reg.add("wk_dom_a", "Pay", fn);
  EXPECT_THROW(reg.add("wk_dom_a", "Pay", fn),
               handler_already_registered_error);
  // Same type in another domain, or another type: fine.
  EXPECT_NO_THROW(reg.add("wk_dom_b", "Pay", fn));
  EXPECT_NO_THROW(reg.add("wk_dom_a", "Refund", fn));
  try {
    reg.add("wk_dom_a", "Pay", fn);
    FAIL() << "no exception";
  } catch (const command_bus_error& err) {
    EXPECT_NE(std::string{err.what()}.find("wk_dom_a/Pay"), std::string::npos)
      << err.what();
  }
  EXPECT_NE(reg.find("wk_dom_b", "Pay"), nullptr);
  EXPECT_EQ(reg.find("wk_dom_b", "Refund"), nullptr);
}

TEST(WorkerConfig, InvalidConfigurationIsRejectedByTheConstructor) {
  auto expect_invalid = [](config::worker_config cfg, const std::string& what) {
    try {
      worker w{cfg, handler_registry{}};
      ADD_FAILURE() << "no exception for " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string{e.what()}.find(what), std::string::npos)
        << e.what();
    }
  };
  auto no_domains = make_cfg({});
  expect_invalid(no_domains, "no domains");
  auto slow_statements = make_cfg({"wk_cfg"});
  slow_statements.visibility_timeout = 5s;
  slow_statements.statement_timeout = 5s;
  expect_invalid(slow_statements, "statement-timeout");
  auto zero = make_cfg({"wk_cfg"});
  zero.concurrency = 0;
  expect_invalid(zero, "concurrency");
  // A valid one constructs (no database access before start()).
  EXPECT_NO_THROW((worker{make_cfg({"wk_cfg"}), handler_registry{}}));
}

// -- `cmdbus worker` ------------------------------------------------------------

namespace {

size_t line_count(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

} // namespace

TEST(WorkerCli, TickReportsWhatIsLeftForLater) {
  // A transient failure whose retry is due in a minute stays in the queue:
  // the tick ends (exit 0) and says so.
  env e;
  auto d = test::unique_name("wkcli");
  auto req = make_req(d, "Test", R"({"behavior":{"fail_transient_pct":100}})");
  e.bus.send(req);
  e.bus.send(make_req(d, "Test"));
  auto r = test::run_cmdbus({"worker", "--tick", "--domain", d, "--dsn",
                             test::dsn(), "--json", "--backoff", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = r.out;
  while (!out.empty() && out.back() == '\n')
    out.pop_back();
  auto line = out.substr(out.rfind('\n') == std::string::npos
                           ? 0
                           : out.rfind('\n') + 1);
  EXPECT_EQ(jget(e.conn, line, "{completed}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{retried}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{remaining}"), opt_str{"1"}) << line;
  r = test::run_cmdbus({"worker", "--tick", "--domain", d, "--dsn", test::dsn(),
                        "--backoff", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("remaining in the queue 1 (not due yet"),
            std::string::npos)
    << r.out;
}

TEST(WorkerCli, TickRunsTheDemoHandlerAndPrintsJsonCounters) {
  env e;
  auto d = test::unique_name("wkcli");
  auto reply_q = d + "__replies";
  auto ok_req = make_req(d, "Test", R"({"behavior":{"result":{"ok":1}}})");
  ok_req.reply_to = reply_q;
  auto ok = e.bus.send(ok_req);
  auto perm = e.bus.send(
    make_req(d, "Test", R"({"behavior":{"fail_permanent_pct":100}})"));
  auto rule_req = make_req(
    d, "Test",
    R"({"behavior":{"fail_business_rule_pct":100,"error_code":"LIMIT"}})");
  rule_req.reply_to = reply_q;
  auto rule = e.bus.send(rule_req);
  auto trans_req
    = make_req(d, "Test", R"({"behavior":{"fail_transient_pct":100}})");
  trans_req.max_attempts = 2;
  auto trans = e.bus.send(trans_req);
  auto r =
      test::run_cmdbus({"worker", "--tick", "--domain", d, "--dsn", test::dsn(),
                        "--json", "--max-attempts", "3", "--backoff", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The last stdout line is the JSON counters.
  auto out = r.out;
  while (!out.empty() && out.back() == '\n')
    out.pop_back();
  auto line = out.substr(out.rfind('\n') == std::string::npos
                           ? 0
                           : out.rfind('\n') + 1);
  EXPECT_EQ(jget(e.conn, line, "{received}"), opt_str{"5"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{completed}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{retried}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{moved_to_tsq}"), opt_str{"2"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{failed}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{rejected}"), opt_str{"0"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{in_flight}"), opt_str{"0"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{remaining}"), opt_str{"0"}) << line;
  EXPECT_EQ(status_of(e.conn, d, ok.command_id), opt_str{"COMPLETED"});
  EXPECT_EQ(status_of(e.conn, d, perm.command_id),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  EXPECT_EQ(column(e.conn, d, perm.command_id, "last_error_code"),
            opt_str{"DEMO_PERMANENT"});
  EXPECT_EQ(status_of(e.conn, d, rule.command_id), opt_str{"FAILED"});
  EXPECT_EQ(column(e.conn, d, rule.command_id, "last_error_code"),
            opt_str{"LIMIT"});
  EXPECT_EQ(status_of(e.conn, d, trans.command_id),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  EXPECT_EQ(attempts_of(e.conn, d, trans.command_id), 2);
  EXPECT_EQ(
    audit_detail(e.conn, d, trans.command_id, "MOVED_TO_TSQ", "{reason}"),
    opt_str{"EXHAUSTED"});
  // One reply each; the handlers ran concurrently, so in either order.
  auto replies = messages(e.conn, reply_q);
  ASSERT_EQ(replies.size(), 2u);
  if (jget(e.conn, replies[0], "{outcome}") != opt_str{"SUCCESS"})
    std::swap(replies[0], replies[1]);
  EXPECT_EQ(jget(e.conn, replies[0], "{outcome}"), opt_str{"SUCCESS"});
  EXPECT_EQ(jget(e.conn, replies[0], "{command_id}"),
            opt_str{ok.command_id.to_string()});
  EXPECT_TRUE(jeq(e.conn, replies[0], "{result}", R"({"ok":1})"));
  EXPECT_EQ(jget(e.conn, replies[1], "{outcome}"), opt_str{"FAILED"});
  EXPECT_EQ(jget(e.conn, replies[1], "{command_id}"),
            opt_str{rule.command_id.to_string()});
  EXPECT_EQ(jget(e.conn, replies[1], "{error_code}"), opt_str{"LIMIT"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
}

TEST(WorkerCli, HelpUsageAndUnreachableDatabase) {
  auto r = test::run_cmdbus({"worker", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--tick"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--domain"), std::string::npos);

  r = test::run_cmdbus({"worker", "--domain", "wk_cli", "--bogus-option"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("bogus-option"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;

  r = test::run_cmdbus({"worker", "--tick", "--domain", "wk_cli", "--dsn",
                        "host=127.0.0.1 port=1 user=cmdbus password=secret "
                        "dbname=nowhere connect_timeout=2"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(r.err.find("secret"), std::string::npos) << r.err;
}
