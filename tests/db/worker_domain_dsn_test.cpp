// Domains spread over databases ([domains.NAME] dsn): one worker serves a
// domain of the test database and one of a second database (a scratch
// database, migrated here), each domain on connections to its own database.
// Cutting the second database's network (a TCP proxy in its DSN) degrades
// only its domain, while the other keeps completing commands; its domain
// recovers once the proxy forwards again.

#include <gtest/gtest.h>

#include "cmdbus/db/migrate.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

/// A second migrated database with a bus and a connection of its own.
struct second_database {
  second_database()
    : pool(options(db.dsn())), bus(pool), conn(open(db.dsn())) {
    // nop
  }

  static db::pool_options options(const std::string& dsn) {
    auto opts = pool_options(2);
    opts.dsn = dsn;
    return opts;
  }

  static db::connection open(const std::string& dsn) {
    auto c = db::connection::open(dsn);
    db::migrate(c, sql::pgmq_files(), sql::commandbus_files());
    return c;
  }

  scratch_database db;
  db::pool pool;
  command_bus bus;
  db::connection conn;
};

/// The health of `domain` in `w`.
domain_health health_of(const worker& w, const std::string& domain) {
  for (auto& d : w.health().domains)
    if (d.domain == domain)
      return d;
  throw std::logic_error("no domain " + domain);
}

std::string reasons(const domain_health& h) {
  std::string out;
  for (auto& r : h.reasons)
    out += r + "; ";
  return out;
}

} // namespace

TEST(WorkerDomainDsn, EachDomainRunsOnItsOwnDatabase) {
  bus_env e;
  second_database two;
  auto a = unique_name("dsa");
  auto b = unique_name("dsb");
  handler_registry reg;
  reg.add(a, "Ok", null_result);
  reg.add(b, "Ok", null_result);
  auto cfg = make_cfg({a, b});
  cfg.domain_dsn[b] = two.db.dsn();
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  auto on_a = e.bus.send(make_req(a, "Ok")).command_id;
  auto on_b = two.bus.send(make_req(b, "Ok")).command_id;
  EXPECT_TRUE(eventually([&] {
    return has_status(e.conn, a, on_a, "COMPLETED")
           && has_status(two.conn, b, on_b, "COMPLETED");
  }));
  // Each domain's queue was created on its own database only.
  EXPECT_EQ(count_status(e.conn, b, "COMPLETED"), 0);
  EXPECT_EQ(count_status(two.conn, a, "COMPLETED"), 0);
  EXPECT_FALSE(scalar(two.conn,
                      "SELECT 1 FROM pgmq.list_queues() WHERE queue_name = $1",
                      queue_of(a)));
  EXPECT_FALSE(scalar(e.conn,
                      "SELECT 1 FROM pgmq.list_queues() WHERE queue_name = $1",
                      queue_of(b)));
}

TEST(WorkerDomainDsn, CuttingOneDatabaseDegradesOnlyItsDomain) {
  bus_env e;
  second_database two;
  // The worker reaches the second database through the proxy only; the test
  // sends and checks directly.
  auto port = *scalar(two.conn, "SELECT current_setting('port')");
  tcp_proxy proxy{std::stoi(port)};
  auto a = unique_name("dsa");
  auto b = unique_name("dsb");
  handler_registry reg;
  reg.add(a, "Ok", null_result);
  reg.add(b, "Ok", null_result);
  auto cfg = make_cfg({a, b});
  cfg.domain_dsn[b] = two.db.dsn() + " port=" + std::to_string(proxy.port())
                      + " connect_timeout=2";
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  auto first_b = two.bus.send(make_req(b, "Ok")).command_id;
  ASSERT_TRUE(
    eventually([&] { return has_status(two.conn, b, first_b, "COMPLETED"); }));

  proxy.cut();
  auto waiting_b = two.bus.send(make_req(b, "Ok")).command_id;
  ASSERT_TRUE(eventually([&] {
    return health_of(w, b).state != health_state::healthy;
  }))
    << reasons(health_of(w, b));
  auto down = health_of(w, b);
  EXPECT_GE(down.figures.failing_sessions, 1);
  ASSERT_FALSE(down.reasons.empty());
  EXPECT_EQ(down.reasons[0].rfind("database unavailable for ", 0), 0u)
    << reasons(down);
  // Meanwhile the other domain completes commands and stays healthy.
  std::vector<uuid> on_a;
  for (int i = 0; i < 5; ++i)
    on_a.push_back(e.bus.send(make_req(a, "Ok")).command_id);
  EXPECT_TRUE(
    eventually([&] { return all_have_status(e.conn, a, on_a, "COMPLETED"); }));
  EXPECT_EQ(health_of(w, a).state, health_state::healthy)
    << reasons(health_of(w, a));
  EXPECT_EQ(health_of(w, a).figures.failing_sessions, 0);
  EXPECT_TRUE(has_status(two.conn, b, waiting_b, "PENDING"));

  proxy.restore();
  EXPECT_TRUE(eventually(
    [&] {
      return has_status(two.conn, b, waiting_b, "COMPLETED")
             && health_of(w, b).state == health_state::healthy;
    },
    30s))
    << reasons(health_of(w, b));
}
