// How a worker ends: stop() waits for the handlers in flight up to its
// timeout and abandons the ones still running then (their commands are
// delivered again after the visibility timeout); run_tick() processes
// everything due, retries included, and stops by itself. Against the real
// database, state checked with SQL.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "cmdbus/model/errors.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- graceful shutdown --------------------------------------------------------

TEST(WorkerShutdown, StopWaitsForInFlightHandler) {
  bus_env e;
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
  bus_env e;
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
  // Claimed at the read, so that the audit trail below does not depend on
  // whether a heartbeat claimed the deferred delivery before the stop.
  cfg.deferred_claims = false;
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

// -- tick mode ----------------------------------------------------------------

TEST(WorkerTick, RunTickProcessesEverythingDueAndStops) {
  bus_env e;
  auto d = test::unique_name("wk");
  auto ok = e.bus.send(make_req(d, "Ok"));
  auto flaky = e.bus.send(make_req(d, "Flaky"));
  auto bad = e.bus.send(make_req(d, "Bad"));
  handler_registry reg;
  reg.add(d, "Ok", null_result);
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
  bus_env e;
  auto d = test::unique_name("wk");
  auto fast = e.bus.send(make_req(d, "Ok"));
  auto slow = e.bus.send(make_req(d, "SlowFlaky"));
  worker* self = nullptr;
  handler_registry reg;
  reg.add(d, "Ok", null_result);
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
