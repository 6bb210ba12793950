// The worker's health (worker::health(), actors/ops/health.hpp) against the real
// database: handler failures in a row degrade a domain until a success,
// stuck handlers make it critical until they return, and a database that
// refuses the worker's connections degrades it until it comes back.

#include <gtest/gtest.h>

#include <atomic>

#include "cmdbus/model/errors.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

health_state state_of(const worker& w) {
  return w.health().state;
}

/// The reasons of the worker's first domain, for failure messages.
std::string reasons(const worker& w) {
  std::string out;
  for (auto& r : w.health().domains.at(0).reasons)
    out += r + "; ";
  return out;
}

} // namespace

TEST(WorkerHealth, FailuresInARowDegradeUntilASuccess) {
  bus_env e;
  auto d = test::unique_name("wh");
  auto n = health_limits::degraded_consecutive_failures + 2;
  for (int64_t i = 0; i < n; ++i)
    e.bus.send(make_req(d, "Bad"));
  handler_registry reg;
  reg.add(d, "Bad", [](const command&, handler_context&) -> json {
    throw permanent_command_error("BROKEN", "always fails");
  });
  reg.add(d, "Ok", null_result);
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  EXPECT_EQ(state_of(w), health_state::healthy);
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "IN_TROUBLESHOOTING_QUEUE") == n; }));
  auto h = w.health();
  EXPECT_EQ(h.state, health_state::degraded);
  ASSERT_EQ(h.domains.size(), 1u);
  EXPECT_EQ(h.domains[0].domain, d);
  EXPECT_EQ(h.domains[0].figures.consecutive_failures, n);
  EXPECT_EQ(h.domains[0].reasons,
            (strings{std::to_string(n) + " consecutive handler failures"}));
  e.bus.send(make_req(d, "Ok"));
  EXPECT_TRUE(eventually([&] { return state_of(w) == health_state::healthy; }))
    << reasons(w);
  EXPECT_EQ(w.health().domains[0].figures.consecutive_failures, 0);
}

TEST(WorkerHealth, StuckHandlersAreCriticalUntilTheyReturn) {
  // Three handlers block past the visibility timeout plus the grace (their
  // leases are extended meanwhile); when they return, the domain recovers.
  bus_env e;
  auto d = test::unique_name("wh");
  std::vector<uuid> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(e.bus.send(make_req(d, "Slow")).command_id);
  holding_handler held;
  handler_registry reg;
  reg.add(d, "Slow", held.fn());
  auto cfg = make_cfg({d}, 3);
  cfg.visibility_timeout = 2s;
  cfg.statement_timeout = 1s;
  worker w{cfg, std::move(reg)};
  finally stop{[&] {
    held.release.open();
    stop_worker(w);
  }};
  w.start();
  ASSERT_TRUE(eventually([&] { return held.entered.load() == 3; }));
  ASSERT_TRUE(
    eventually([&] { return state_of(w) == health_state::critical; }, 30s))
    << reasons(w);
  auto h = w.health();
  EXPECT_EQ(h.domains[0].figures.stuck_handlers, 3);
  EXPECT_EQ(h.domains[0].reasons,
            (strings{"3 handler(s) stuck past visibility timeout + 5s"}));
  held.release.open();
  EXPECT_TRUE(eventually([&] {
    return all_have_status(e.conn, d, ids, "COMPLETED")
           && state_of(w) == health_state::healthy;
  }))
    << reasons(w);
}

TEST(WorkerHealth, ADatabaseRefusingConnectionsDegradesUntilItReturns) {
  // The test database stops accepting connections and the worker's are
  // ended (as in an outage): its sessions fail and reconnect with backoff.
  bus_env e;
  auto d = test::unique_name("wh");
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  worker w{make_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  auto first = e.bus.send(make_req(d, "Ok")).command_id;
  ASSERT_TRUE(
    eventually([&] { return has_status(e.conn, d, first, "COMPLETED"); }));
  EXPECT_EQ(state_of(w), health_state::healthy);
  // A database cannot refuse connections while the session asking is in it.
  auto admin = db::connection::open(with_dbname(dsn(), "postgres"));
  auto db
    = *e.conn.query("SELECT quote_ident(current_database())").opt_text(0, 0);
  admin.exec("ALTER DATABASE " + db + " ALLOW_CONNECTIONS false");
  bool allowed = false;
  finally reopen{[&] {
    if (!allowed)
      admin.exec("ALTER DATABASE " + db + " ALLOW_CONNECTIONS true");
  }};
  e.conn.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
              "datname = current_database() AND pid <> pg_backend_pid() AND "
              "application_name IN ('cmdbus-worker', 'cmdbus-poller')");
  ASSERT_TRUE(eventually([&] { return state_of(w) != health_state::healthy; }))
    << reasons(w);
  auto h = w.health();
  EXPECT_GE(h.domains[0].figures.failing_sessions, 1);
  ASSERT_FALSE(h.domains[0].reasons.empty());
  EXPECT_EQ(h.domains[0].reasons[0].rfind("database unavailable for ", 0), 0u)
    << reasons(w);
  admin.exec("ALTER DATABASE " + db + " ALLOW_CONNECTIONS true");
  allowed = true;
  auto second = e.bus.send(make_req(d, "Ok")).command_id;
  EXPECT_TRUE(eventually(
    [&] {
      return has_status(e.conn, d, second, "COMPLETED")
             && state_of(w) == health_state::healthy;
    },
    60s))
    << reasons(w);
}

TEST(WorkerHealth, AWriterThatCannotCommitDegradesUntilItDoes) {
  // The command's row is locked by another transaction while its handler
  // runs: the completion writer's transaction waits on the lock (no error,
  // so no outage), and after 10 s without a commit the supervisor counts it
  // as stalled. When the lock goes, the outcome commits and the domain
  // recovers.
  bus_env e;
  auto d = test::unique_name("wh");
  holding_handler held;
  handler_registry reg;
  reg.add(d, "Held", held.fn());
  auto cfg = make_cfg({d}, 1);
  // Long enough for the stall to be seen (10 s, then a heartbeat every
  // 5 s) before the statement timeout would end the wait.
  cfg.visibility_timeout = 20s;
  cfg.statement_timeout = 19s;
  worker w{cfg, std::move(reg)};
  finally stop{[&] {
    held.release.open();
    stop_worker(w, 30s);
  }};
  w.start();
  auto id = e.bus.send(make_req(d, "Held")).command_id;
  ASSERT_TRUE(eventually([&] { return held.entered.load() == 1; }));
  auto locker = db::connection::open(dsn());
  locker.exec("BEGIN");
  bool locked = true;
  finally unlock{[&] {
    if (locked)
      locker.exec("ROLLBACK");
  }};
  locker.query("SELECT 1 FROM commandbus.command WHERE domain = $1 AND "
               "command_id = $2 FOR UPDATE",
               d, id.to_string());
  held.release.open();
  ASSERT_TRUE(
    eventually([&] { return state_of(w) == health_state::degraded; }, 40s))
    << reasons(w);
  auto h = w.health();
  EXPECT_EQ(h.domains[0].figures.stalled_writers, 1);
  EXPECT_EQ(h.domains[0].figures.failing_sessions, 0);
  EXPECT_EQ(h.domains[0].reasons,
            (strings{"1 side-effect writer(s) not committing for 10s"}));
  EXPECT_FALSE(has_status(e.conn, d, id, "COMPLETED"));
  locker.exec("ROLLBACK");
  locked = false;
  EXPECT_TRUE(eventually(
    [&] {
      return has_status(e.conn, d, id, "COMPLETED")
             && state_of(w) == health_state::healthy;
    },
    30s))
    << reasons(w);
}
