// The worker under faults and at its own shutdown, against the real
// database: connections cut under load, writes that keep failing while
// reads work (the hold limit), a lease extension from a non-blocking
// handler while the database waits on a lock, a handler context kept past
// its handler, and every way of stopping a running worker (destructor,
// stop_now, stop, from several threads, with handlers still running).
//
// A stop that could hang runs on a thread of its own, awaited with a
// deadline (`returns_within`), so that a hang fails the test instead of
// blocking the suite.

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <thread>

#include "cmdbus/db/queue_name.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

/// The sessions of the workers of this database, in pg_stat_activity.
constexpr const char* worker_sessions
  = " FROM pg_stat_activity WHERE datname = current_database() AND pid <> "
    "pg_backend_pid() AND application_name IN ('cmdbus-worker', "
    "'cmdbus-poller', 'cmdbus-listener', 'cmdbus-batches')";

/// Ends every connection the workers of this database hold (the server
/// side of a restart or of a cut connection); returns how many.
int64_t cut_worker_connections(db::connection& c) {
  return c
    .query(std::string{"SELECT count(pg_terminate_backend(pid))"}
           + worker_sessions)
    .int64(0, 0);
}

/// The connections the workers of this database hold.
int64_t worker_connections(db::connection& c) {
  return c.query(std::string{"SELECT count(*)"} + worker_sessions).int64(0, 0);
}

/// Commands of `domain` with more than one COMPLETED audit row.
int64_t completed_twice(db::connection& c, const std::string& domain) {
  return c
    .query("SELECT count(*) FROM (SELECT command_id FROM commandbus.audit "
           "WHERE domain = $1 AND event_type = 'COMPLETED' GROUP BY "
           "command_id HAVING count(*) > 1) t",
           domain)
    .int64(0, 0);
}

std::vector<uuid> send_oks(bus_env& e, const std::string& domain, int n,
                           const std::string& type = "Ok") {
  std::vector<uuid> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back(e.bus.send(make_req(domain, type)).command_id);
  return ids;
}

} // namespace

// -- recovery ------------------------------------------------------------------

TEST(WorkerFaults, CompletesEverythingAfterItsConnectionsAreCut) {
  // Every connection of the worker is ended three times while it works
  // through a load (as a server restart does): each actor reconnects on its
  // own and every command completes exactly once.
  bus_env e;
  auto d = test::unique_name("wf");
  // Enough work that the third cut still finds some: 8 slots of 5 ms take
  // at least 1.9 s for 3,000 commands (the auto prefetch keeps the slots
  // busy; the cuts are done within a second).
  constexpr int total = 3000;
  auto ids = send_oks(e, d, total);
  handler_registry reg;
  reg.add(d, "Ok", [](const command&, handler_context&) -> json {
    std::this_thread::sleep_for(5ms);
    return json::null();
  });
  auto cfg = make_cfg({d}, 8);
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  for (int cut = 1; cut <= 3; ++cut) {
    // Progress made on connections opened since the last cut: a write
    // whose commit raced with that cut can still add its rows after it,
    // while the worker is only about to reconnect.
    ASSERT_TRUE(eventually([&] { return worker_connections(e.conn) > 0; }))
      << "the worker did not reconnect before cut " << cut;
    auto before = count_status(e.conn, d, "COMPLETED");
    ASSERT_TRUE(eventually(
      [&] { return count_status(e.conn, d, "COMPLETED") > before + 20; }))
      << "no progress before cut " << cut;
    // The sessions counted above may be the previous cut's, still listed
    // while their backends exit: cut as soon as the worker holds one.
    EXPECT_TRUE(eventually([&] { return cut_worker_connections(e.conn) > 0; }))
      << "no connection of the worker to cut at cut " << cut;
  }
  EXPECT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") == total; }, 60s))
    << count_status(e.conn, d, "COMPLETED") << " of " << total
    << " completed";
  EXPECT_EQ(completed_twice(e.conn, d), 0);
  EXPECT_GT(w.stats().db_errors, 0);
}

TEST(WorkerFaults, ClaimsNoMoreThanTheHoldLimitWhileWritesFail) {
  // The completion's writes fail (the database refuses them) while reads
  // work: the worker holds at most 4 x concurrency messages without
  // committed side effects and claims nothing more, so no attempt is burnt
  // while it cannot write; once writes work again everything completes on
  // its first attempt.
  bus_env e;
  auto d = test::unique_name("wf");
  auto trigger = test::unique_name("refuse");
  // The trigger lives in the shared schema: scoped to this test's domain,
  // dropped on every exit path.
  e.conn.exec("CREATE FUNCTION " + trigger
              + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE "
                "EXCEPTION 'writes refused'; END $$");
  finally drop{[&] {
    auto c = test::connect();
    c.exec("DROP TRIGGER IF EXISTS " + trigger + " ON commandbus.command");
    c.exec("DROP FUNCTION IF EXISTS " + trigger + "()");
  }};
  db::validate_queue_name(d); // interpolated below
  e.conn.exec("CREATE TRIGGER " + trigger
              + " BEFORE UPDATE ON commandbus.command FOR EACH ROW WHEN "
                "(NEW.domain = '"
              + d + "' AND NEW.status = 'COMPLETED') EXECUTE FUNCTION "
              + trigger + "()");
  auto ids = send_oks(e, d, 20);
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  auto cfg = make_cfg({d}, 2);
  // No prefetch: the hold limit is 4 x 2 slots (an auto prefetch would
  // raise it with the slots it adds).
  cfg.prefetch = 0;
  cfg.visibility_timeout = 30s;
  cfg.statement_timeout = 10s;
  // Claimed at the read, so that the held commands are counted as claims.
  cfg.deferred_claims = false;
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  // The limit is reached and several writes failed since.
  ASSERT_TRUE(eventually([&] {
    return count_status(e.conn, d, "IN_PROGRESS") == 8
           && w.stats().db_errors >= 4;
  })) << count_status(e.conn, d, "IN_PROGRESS") << " claimed, "
      << w.stats().db_errors << " failed writes";
  EXPECT_EQ(count_status(e.conn, d, "IN_PROGRESS"), 8);
  EXPECT_EQ(count_status(e.conn, d, "PENDING"), 12);
  e.conn.exec("DROP TRIGGER " + trigger + " ON commandbus.command");
  EXPECT_TRUE(eventually([&] {
    return count_status(e.conn, d, "COMPLETED") == 20;
  }, 30s));
  for (auto& id : ids)
    EXPECT_EQ(attempts_of(e.conn, d, id), 1);
}

TEST(WorkerFaults, AnErrorTextThatCannotBeStoredHoldsNothingBack) {
  // A handler's error text with bytes that are not UTF-8 (and a NUL) is
  // stored with replacement characters, and the commands written with it
  // complete as usual.
  bus_env e;
  auto d = test::unique_name("wf");
  auto bad_req = make_req(d, "Bad");
  bad_req.reply_to = d + "__replies";
  auto bad = e.bus.send(bad_req);
  auto ids = send_oks(e, d, 10);
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  reg.add(d, "Bad", [](const command&, handler_context&) -> json {
    throw business_rule_error("BAD\xff",
                              std::string{"caf\xc3 \0 \xed\xa0\x80", 10});
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  EXPECT_TRUE(eventually([&] {
    return has_status(e.conn, d, bad.command_id, "FAILED")
           && all_have_status(e.conn, d, ids, "COMPLETED");
  }));
  EXPECT_EQ(column(e.conn, d, bad.command_id, "last_error_code"),
            opt_str{"BAD\xef\xbf\xbd"});
  EXPECT_EQ(queue_rows(e.conn, d + "__replies"), 1);
}

// -- leases and the handler context ----------------------------------------

TEST(WorkerLease, NonBlockingExtensionNeverWaitsForTheDatabase) {
  // A non-blocking handler runs on a scheduler thread: its lease extension
  // is queued and returns at once, even while the database makes the
  // extension wait (here: a lock on the message's row).
  bus_env e;
  auto d = test::unique_name("wl");
  auto sent = e.bus.send(make_req(d, "Quick"));
  gate started, go;
  std::atomic<bool> extended{false};
  handler_registry reg;
  reg.add(
    d, "Quick",
    [&](const command&, handler_context& ctx) -> json {
      started.open();
      go.wait();
      ctx.extend_visibility(60s);
      extended = true;
      return json::null();
    },
    handler_mode::non_blocking);
  auto cfg = make_cfg({d});
  cfg.visibility_timeout = 30s;
  cfg.statement_timeout = 10s;
  worker w{cfg, std::move(reg)};
  finally stop{[&] {
    go.open();
    stop_worker(w);
  }};
  w.start();
  ASSERT_TRUE(started.wait());
  auto locker = test::connect();
  db::transaction tx{locker};
  locker.query("SELECT msg_id FROM pgmq.q_" + queue_of(d)
                 + " WHERE msg_id = $1 FOR UPDATE",
               static_cast<long long>(sent.msg_id));
  go.open();
  EXPECT_TRUE(eventually([&] { return extended.load(); }, 5s))
    << "extend_visibility waited for the locked row";
}

TEST(WorkerLease, ContextKeptPastTheHandlerStaysSafe) {
  // A handler may hand its context to another thread; once the handler
  // returned, the command is still readable and an extension is refused
  // (the message may belong to another delivery by now).
  bus_env e;
  auto d = test::unique_name("wl");
  auto sent = e.bus.send(make_req(d, "Ok"));
  std::mutex mtx;
  std::optional<handler_context> kept;
  handler_registry reg;
  reg.add(d, "Ok", [&](const command&, handler_context& ctx) -> json {
    std::lock_guard<std::mutex> guard{mtx};
    kept.emplace(ctx);
    return json::null();
  });
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return has_status(e.conn, d, sent.command_id, "COMPLETED"); }));
  stop_worker(w);
  std::lock_guard<std::mutex> guard{mtx};
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->cmd().command_id, sent.command_id);
  EXPECT_EQ(kept->msg_id(), sent.msg_id);
  EXPECT_THROW(kept->extend_visibility(10s), command_bus_error);
}

// -- shutdown ------------------------------------------------------------------

TEST(WorkerShutdown, DestroyingARunningWorkerReturns) {
  // Also what an application that throws between start() and stop() does.
  auto d = test::unique_name("ws");
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  auto w = std::make_shared<std::unique_ptr<worker>>(
    std::make_unique<worker>(make_cfg({d}), std::move(reg)));
  (*w)->start();
  EXPECT_TRUE(returns_within([w] { w->reset(); }));
}

TEST(WorkerShutdown, StopWithNothingInFlightReturnsPromptly) {
  auto d = test::unique_name("ws");
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  worker w{make_cfg({d}), std::move(reg)};
  w.start();
  auto stopped = w.stop(60s);
  // Far below the timeout: nothing waited for it.
  EXPECT_EQ(stopped.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(w.is_running());
}

TEST(WorkerShutdown, StopsRaceFromManyThreadsWithHandlersRunning) {
  // stop(), stop_now() and the destructor, at once and repeated, while
  // handlers block in application code: each returns, and the handlers
  // finish in the background after the worker is gone.
  bus_env e;
  auto d = test::unique_name("ws");
  send_oks(e, d, 4, "Block");
  auto go = std::make_shared<gate>();
  auto running = std::make_shared<std::atomic<int>>(0);
  auto returned = std::make_shared<std::atomic<int>>(0);
  handler_registry reg;
  reg.add(d, "Block", [go, running, returned](const command&,
                                              handler_context&) -> json {
    ++*running;
    go->wait(30s);
    ++*returned;
    return json::null();
  });
  auto w = std::make_shared<worker>(make_cfg({d}, 4), std::move(reg));
  finally release{[go] { go->open(); }};
  w->start();
  ASSERT_TRUE(eventually([&] { return running->load() == 4; }));
  std::vector<std::future<void>> stops;
  EXPECT_TRUE(returns_within([w, &stops] {
    stops.push_back(w->stop(300ms));
    std::thread a{[w] { w->stop_now(); }};
    std::thread b{[w] { w->stop_now(); }};
    stops.push_back(w->stop(300ms));
    a.join();
    b.join();
    for (auto& f : stops)
      f.get();
  }));
  EXPECT_FALSE(w->is_running());
  // The last handle goes while the handlers still block.
  EXPECT_TRUE(returns_within([&w] { w.reset(); }));
  go->open();
  EXPECT_TRUE(eventually([&] { return returned->load() == 4; }));
}

TEST(WorkerShutdown, StopFutureOutlivesTheWorker) {
  auto d = test::unique_name("ws");
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  auto w = std::make_unique<worker>(make_cfg({d}), std::move(reg));
  w->start();
  auto stopped = w->stop(5s);
  w.reset();
  EXPECT_EQ(stopped.wait_for(10s), std::future_status::ready);
}
