// How many commands a worker runs and holds at once: no more handlers than
// its concurrency, up to concurrency + prefetch messages claimed (the
// prefetched ones keep their lease while they wait), and hundreds of
// blocking handlers truly in parallel without losing a command. Against
// the real database, state checked with SQL.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- concurrency limit and in-flight count ------------------------------------

TEST(WorkerRun, RespectsConcurrencyLimitAndCountsInFlight) {
  bus_env e;
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
  EXPECT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "IN_PROGRESS") == concurrency; }));
  EXPECT_EQ(count_status(e.conn, d, "PENDING"), total - concurrency);
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

// -- prefetch -----------------------------------------------------------------

// With prefetch, a domain claims up to concurrency + prefetch messages; the
// extra ones wait for a free handler, and no more handlers run at once than
// the concurrency.
TEST(WorkerRun, PrefetchClaimsAheadButRunsNoMoreThanTheConcurrency) {
  bus_env e;
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
  // Claimed at the read, so that what it holds is counted as claims.
  cfg.deferred_claims = false;
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
  EXPECT_EQ(count_status(e.conn, d, "IN_PROGRESS"), concurrency + prefetch);
  EXPECT_EQ(count_status(e.conn, d, "PENDING"),
            total - concurrency - prefetch);
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
  bus_env e;
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
  auto queue = queue_of(d);
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

// -- load ---------------------------------------------------------------------

TEST(WorkerLoad, HundredsOfBlockingHandlersRunAtOnceAndLoseNothing) {
  // 256 handler slots, 2,000 commands. Every handler blocks until all 256
  // slots are inside a handler at the same time (so blocking handlers truly
  // run in parallel and never stall each other), then the rest flows
  // through. Every command completes exactly once and the limit holds.
  bus_env e;
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
