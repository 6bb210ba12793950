// The lease of a running command (its message's visibility timeout): a
// handler may extend it (handler_context::extend_visibility sets the
// message's vt), and a heartbeat extends it before it expires while the
// handler runs, without ever shortening an explicit extension, so that a
// long handler's command is not delivered a second time. Against the real
// database, state checked with SQL.

#include <gtest/gtest.h>

#include <atomic>
#include <exception>

#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- explicit extension -------------------------------------------------------

TEST(WorkerVisibility, ExtendVisibilityMovesVt) {
  bus_env e;
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

// -- heartbeat ----------------------------------------------------------------

TEST(WorkerVisibility, HeartbeatDoesNotShortenAnExplicitExtension) {
  bus_env e;
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
  bus_env e;
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
