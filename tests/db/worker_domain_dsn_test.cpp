// Domains spread over databases ([domains.NAME] dsn): one worker serves a
// domain of the test database and one of a second database (a scratch
// database, migrated here), each domain on connections to its own database.
// Cutting the second database's network (a TCP proxy in its DSN) degrades
// only its domain, while the other keeps completing commands; its domain
// recovers once the proxy forwards again. What concerns several domains
// (batch callbacks, the HTTP endpoint's queue figures) works per database.

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "cmdbus/db/migrate.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/process.hpp"
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

/// Batch callbacks as they fire.
struct fired_batches {
  std::mutex mtx;
  std::vector<std::pair<std::string, uuid>> fired;

  batch_callback fn() {
    return [this](const std::string& domain, const uuid& id) {
      std::lock_guard<std::mutex> guard{mtx};
      fired.emplace_back(domain, id);
    };
  }

  bool has(const std::string& domain, const uuid& id) {
    std::lock_guard<std::mutex> guard{mtx};
    return std::find(fired.begin(), fired.end(), std::make_pair(domain, id))
           != fired.end();
  }
};

/// A batch of one "Ok" command.
std::vector<batch_command> one_ok() {
  batch_command c;
  c.command_type = "Ok";
  c.command_id = uuid::random();
  return {c};
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
  cfg.http = "127.0.0.1:0";
  worker w{cfg, std::move(reg)};
  fired_batches batches;
  w.on_batch_complete(batches.fn());
  finally stop{[&] { stop_worker(w); }};
  w.start();
  auto on_a = e.bus.send(make_req(a, "Ok")).command_id;
  auto on_b = two.bus.send(make_req(b, "Ok")).command_id;
  auto batch_a = e.bus.create_batch(a, one_ok()).batch_id;
  auto batch_b = two.bus.create_batch(b, one_ok()).batch_id;
  EXPECT_TRUE(eventually([&] {
    return has_status(e.conn, a, on_a, "COMPLETED")
           && has_status(two.conn, b, on_b, "COMPLETED");
  }));
  // The batch counter delivers each database's batches.
  EXPECT_TRUE(eventually(
    [&] { return batches.has(a, batch_a) && batches.has(b, batch_b); }));
  // The endpoint reads each domain's queue figures on its database.
  metrics m;
  EXPECT_TRUE(eventually([&] {
    m = scrape(w.http_port());
    return m.value("cmdbus_queue_figures_up", {}) == 1
           && m.value("cmdbus_queue_depth", {{"queue", queue_of(a)}}) == 0
           && m.value("cmdbus_queue_depth", {{"queue", queue_of(b)}}) == 0;
  })) << m.text;
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
  cfg.http = "127.0.0.1:0";
  worker w{cfg, std::move(reg)};
  fired_batches batches;
  w.on_batch_complete(batches.fn());
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
  // Its batch callbacks too, and the endpoint still shows its queue.
  auto batch_a = e.bus.create_batch(a, one_ok()).batch_id;
  EXPECT_TRUE(eventually([&] { return batches.has(a, batch_a); }));
  metrics m;
  EXPECT_TRUE(eventually([&] {
    m = scrape(w.http_port());
    return m.value("cmdbus_queue_figures_up", {}) == 0
           && m.value("cmdbus_queue_depth", {{"queue", queue_of(a)}}) == 0
           && m.value("cmdbus_queue_depth", {{"queue", queue_of(b)}}) == -1;
  })) << m.text;

  proxy.restore();
  EXPECT_TRUE(eventually(
    [&] {
      return has_status(two.conn, b, waiting_b, "COMPLETED")
             && health_of(w, b).state == health_state::healthy;
    },
    30s))
    << reasons(health_of(w, b));
}

TEST(WorkerDomainDsn, CmdbusWorkerChecksAndServesEachDatabase) {
  bus_env e;
  second_database two;
  scratch_database bare; // never migrated
  auto a = unique_name("dsa");
  auto b = unique_name("dsb");
  auto ok = R"({"behavior":{"outcome":"success"}})";
  auto on_a = e.bus.send(make_req(a, "Test", ok)).command_id;
  auto on_b = two.bus.send(make_req(b, "Test", ok)).command_id;
  auto worker_args = [&](const std::string& b_dsn) {
    return std::vector<std::string>{
      "worker", "--demo", "--tick", "--create", "--dsn", dsn(), "--domain",
      a, "--domain", b, "--domain-dsn", b + "=" + b_dsn, "--json"};
  };
  // Every database a domain lives on must be migrated.
  auto r = run_cmdbus(worker_args(bare.dsn()));
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_NE(r.out.find("never migrated"), std::string::npos) << r.out;
  EXPECT_TRUE(has_status(e.conn, a, on_a, "PENDING"));
  // Each domain's queue is created and drained on its own database; the
  // count of what is left covers both.
  r = run_cmdbus(worker_args(two.db.dsn()));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(jget(e.conn, last_line(r.out), "{remaining}"), opt_str{"0"})
    << r.out;
  EXPECT_TRUE(has_status(e.conn, a, on_a, "COMPLETED"));
  EXPECT_TRUE(has_status(two.conn, b, on_b, "COMPLETED"));
  // Also from the environment.
  auto later = two.bus.send(make_req(b, "Test", ok)).command_id;
  r = run_cmdbus({"worker", "--demo", "--tick", "--dsn", dsn(), "--domain", a,
                  "--domain", b},
                 {"CMDBUS_DOMAIN_DSN_" + b + "=" + two.db.dsn()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_status(two.conn, b, later, "COMPLETED"));
}

TEST(WorkerDomainDsn, CmdbusWorkerMasksAndChecksTheSetting) {
  auto r = run_cmdbus({"worker", "--dump-config", "--domain", "dsn_a",
                       "--domain", "dsn_b", "--domain-dsn",
                       "dsn_b=host=db2 password=secret"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[domains.dsn_b]\ndsn = \"host=db2 password=***\""),
            std::string::npos)
    << r.out;
  EXPECT_EQ(r.out.find("secret"), std::string::npos) << r.out;
  r = run_cmdbus({"worker", "--demo", "--domain", "dsn_a", "--domain-dsn",
                  "dsn_c=host=db2 password=secret"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("\"dsn_c\" is not a served domain"), std::string::npos)
    << r.err;
  EXPECT_EQ(r.err.find("secret"), std::string::npos) << r.err;
}
