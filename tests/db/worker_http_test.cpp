// The worker's HTTP endpoint ([worker] http, actors/ops/http_endpoint.hpp)
// against the real database: /healthz and /readyz codes through a worker's
// life (starting, ready, draining, critical, stopped), /metrics read by a
// real exposition-format parser (tests/support/parse_metrics.py, Debian's
// python3-prometheus-client) and compared with the database's own counts
// after a mixed load, and a port that is taken.

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <sstream>

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/version.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

config::worker_config http_cfg(const strings& domains, int concurrency = 4) {
  auto cfg = make_cfg(domains, concurrency);
  cfg.http = "127.0.0.1:0";
  return cfg;
}

int64_t count_where(db::connection& c, const std::string& domain,
                    const std::string& type, const std::string& status) {
  return c
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
           "command_type = $2 AND status = $3",
           domain, type, status)
    .int64(0, 0);
}

// Deliveries of a type: every attempt a handler ran.
int64_t attempts_of(db::connection& c, const std::string& domain,
                    const std::string& type) {
  return c
    .query("SELECT coalesce(sum(attempts), 0) FROM commandbus.command WHERE "
           "domain = $1 AND command_type = $2",
           domain, type)
    .int64(0, 0);
}

bool all_terminal(db::connection& c, const std::string& domain) {
  return c.query("SELECT count(*) FROM commandbus.command WHERE domain = $1 "
                 "AND status NOT IN ('COMPLETED', 'FAILED', "
                 "'IN_TROUBLESHOOTING_QUEUE')",
                 domain)
           .int64(0, 0)
         == 0;
}

} // namespace

TEST(WorkerHttp, HealthAndReadinessFollowTheWorkersLife) {
  bus_env e;
  auto d = test::unique_name("wht");
  holding_handler held;
  handler_registry reg;
  reg.add(d, "Slow", held.fn());
  worker w{http_cfg({d}), std::move(reg)};
  finally stop{[&] {
    held.release.open();
    stop_worker(w);
  }};
  EXPECT_EQ(w.http_port(), 0);
  w.start();
  auto port = w.http_port();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(
    eventually([&] { return http_get(port, "/readyz").status == 200; }));
  auto ready = http_get(port, "/readyz");
  EXPECT_NE(ready.body.find("\"ready\":true"), std::string::npos) << ready.body;
  EXPECT_NE(ready.body.find("\"polling\":true"), std::string::npos);
  auto health = http_get(port, "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.content_type, "application/json");
  EXPECT_EQ(health.body, "{\"status\":\"HEALTHY\",\"domains\":[{\"domain\":\""
                           + d + "\",\"status\":\"HEALTHY\",\"reasons\":[]}]}");
  // A command holds the drain: readiness goes at once, health stays.
  auto id = e.bus.send(make_req(d, "Slow")).command_id;
  ASSERT_TRUE(eventually([&] { return held.entered.load() == 1; }));
  auto stopped = w.stop(20s);
  ASSERT_TRUE(
    eventually([&] { return http_get(port, "/readyz").status == 503; }));
  EXPECT_NE(http_get(port, "/readyz").body.find("\"state\":\"draining\""),
            std::string::npos);
  EXPECT_EQ(http_get(port, "/healthz").status, 200);
  held.release.open();
  ASSERT_EQ(stopped.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(has_status(e.conn, d, id, "COMPLETED"));
  // Stopped: the endpoint is gone with the worker.
  EXPECT_EQ(w.http_port(), 0);
  EXPECT_EQ(http_get(port, "/healthz").status, 0);
}

TEST(WorkerHttp, HealthzAnswers503WhileADomainIsCritical) {
  bus_env e;
  auto d = test::unique_name("wht");
  for (int i = 0; i < 3; ++i)
    e.bus.send(make_req(d, "Stuck"));
  holding_handler held;
  handler_registry reg;
  reg.add(d, "Stuck", held.fn());
  auto cfg = http_cfg({d}, 3);
  cfg.visibility_timeout = 2s;
  cfg.statement_timeout = 1s;
  worker w{cfg, std::move(reg)};
  finally stop{[&] {
    held.release.open();
    stop_worker(w);
  }};
  w.start();
  auto port = w.http_port();
  ASSERT_TRUE(eventually([&] { return held.entered.load() == 3; }));
  ASSERT_TRUE(
    eventually([&] { return http_get(port, "/healthz").status == 503; }, 30s));
  auto body = http_get(port, "/healthz").body;
  EXPECT_NE(body.find("\"status\":\"CRITICAL\""), std::string::npos) << body;
  EXPECT_NE(body.find("3 handler(s) stuck past visibility timeout"),
            std::string::npos)
    << body;
  auto m = scrape(port);
  EXPECT_EQ(m.value("cmdbus_health", {{"domain", d}}), 2);
  held.release.open();
  EXPECT_TRUE(
    eventually([&] { return http_get(port, "/healthz").status == 200; }, 30s));
}

TEST(WorkerHttp, MetricsMatchTheDatabaseAfterAMixedLoad) {
  // Outcomes of every kind: successes, business-rule failures, a retry
  // then a success, permanent failures and exhausted retries (both to the
  // TSQ). The parsed metrics must say what the command table says.
  bus_env e;
  auto d = test::unique_name("whm");
  const std::map<std::string, int> sent{
    {"Ok", 30}, {"Rule", 5}, {"Flaky", 6}, {"Broken", 3}, {"Hopeless", 2}};
  for (auto& [type, n] : sent)
    for (int i = 0; i < n; ++i)
      e.bus.send(make_req(d, type));
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  reg.add(d, "Rule", [](const command&, handler_context&) -> json {
    throw business_rule_error("RULE", "refused by a rule");
  });
  reg.add(d, "Flaky", [](const command&, handler_context& ctx) -> json {
    if (ctx.attempt() == 1)
      throw transient_command_error("BUSY", "try again");
    return json::null();
  });
  reg.add(d, "Broken", [](const command&, handler_context&) -> json {
    throw permanent_command_error("BROKEN", "cannot ever work");
  });
  reg.add(d, "Hopeless", [](const command&, handler_context&) -> json {
    throw transient_command_error("DOWN", "never comes back");
  });
  worker w{http_cfg({d}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] { return all_terminal(e.conn, d); }, 60s));
  auto port = w.http_port();
  // The outcomes are counted after their commit: wait until every one is.
  int64_t total = 0;
  for (auto& [type, n] : sent)
    total += n;
  metrics m;
  ASSERT_TRUE(eventually([&] {
    m = scrape(port);
    double finished = 0;
    for (auto& [type, n] : sent)
      for (auto* o : {"completed", "failed", "moved_to_tsq"})
        finished += m.value("cmdbus_commands_total", {{"domain", d},
                                                      {"command_type", type},
                                                      {"outcome", o}});
    return finished == static_cast<double>(total);
  }))
    << m.text;
  int64_t deliveries = 0;
  for (auto& [type, n] : sent) {
    SCOPED_TRACE(type);
    auto of = [&, &type = type](const char* outcome) {
      return m.value("cmdbus_commands_total", {{"domain", d},
                                               {"command_type", type},
                                               {"outcome", outcome}});
    };
    EXPECT_EQ(of("completed"), count_where(e.conn, d, type, "COMPLETED"));
    EXPECT_EQ(of("failed"), count_where(e.conn, d, type, "FAILED"));
    EXPECT_EQ(of("moved_to_tsq"),
              count_where(e.conn, d, type, "IN_TROUBLESHOOTING_QUEUE"));
    // Every delivery but the last of a command was a retry.
    auto attempts = attempts_of(e.conn, d, type);
    EXPECT_EQ(of("retried"), attempts - n);
    EXPECT_EQ(m.value("cmdbus_handler_duration_seconds_count",
                      {{"domain", d}, {"command_type", type}}),
              attempts);
    EXPECT_EQ(m.value("cmdbus_handler_duration_seconds_bucket",
                      {{"domain", d}, {"command_type", type}, {"le", "+Inf"}}),
              attempts);
    deliveries += attempts;
  }
  // The figures of the mix itself, so that the comparison above is not
  // one of zeros.
  EXPECT_EQ(count_where(e.conn, d, "Ok", "COMPLETED"), 30);
  EXPECT_EQ(count_where(e.conn, d, "Flaky", "COMPLETED"), 6);
  EXPECT_EQ(attempts_of(e.conn, d, "Flaky"), 12);
  EXPECT_EQ(count_where(e.conn, d, "Hopeless", "IN_TROUBLESHOOTING_QUEUE"), 2);
  EXPECT_EQ(m.value("cmdbus_commands_received_total", {{"domain", d}}),
            deliveries);
  EXPECT_EQ(m.value("cmdbus_handler_slots", {{"domain", d}}), 4);
  EXPECT_EQ(m.value("cmdbus_in_flight", {{"domain", d}}), 0);
  EXPECT_EQ(m.value("cmdbus_tsq_commands", {{"domain", d}}), 5);
  EXPECT_EQ(m.value("cmdbus_queue_depth", {{"queue", d + "__commands"}}), 0);
  EXPECT_EQ(m.value("cmdbus_queue_figures_up", {}), 1);
  EXPECT_EQ(m.value("cmdbus_build_info", {{"version", version()}}), 1);
  for (auto* actor : {"poller", "completion", "retry_scheduler"})
    EXPECT_EQ(
      m.value("cmdbus_db_errors_total", {{"domain", d}, {"actor", actor}}), 0);
}

TEST(WorkerHttp, QueueFiguresShowWhatWaits) {
  // One slot, held: one message invisible, the rest visible and ageing.
  bus_env e;
  auto d = test::unique_name("whq");
  for (int i = 0; i < 4; ++i)
    e.bus.send(make_req(d, "Hold"));
  holding_handler held;
  handler_registry reg;
  reg.add(d, "Hold", held.fn());
  worker w{http_cfg({d}, 1), std::move(reg)};
  finally stop{[&] {
    held.release.open();
    stop_worker(w);
  }};
  w.start();
  auto port = w.http_port();
  ASSERT_TRUE(eventually([&] { return held.entered.load() == 1; }));
  auto queue = d + "__commands";
  metrics m;
  ASSERT_TRUE(eventually([&] {
    m = scrape(port);
    return m.value("cmdbus_queue_visible", {{"queue", queue}}) == 3
           && m.value("cmdbus_queue_oldest_visible_age_seconds",
                      {{"queue", queue}})
                > 0;
  }))
    << m.text;
  EXPECT_EQ(m.value("cmdbus_queue_depth", {{"queue", queue}}), 4);
  EXPECT_EQ(m.value("cmdbus_in_flight", {{"domain", d}}), 1);
  EXPECT_EQ(m.value("cmdbus_handler_slots", {{"domain", d}}), 1);
  EXPECT_EQ(m.value("cmdbus_tsq_commands", {{"domain", d}}), 0);
}

TEST(WorkerHttp, APortInUseStartsNothing) {
  // A listening socket holds a port; a worker told to use it fails to
  // start, with the address in the message.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  finally close_fd{[&] { ::close(fd); }};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto port = ntohs(addr.sin_port);
  auto d = test::unique_name("whp");
  auto cfg = make_cfg({d});
  cfg.http = "127.0.0.1:" + std::to_string(port);
  handler_registry reg;
  reg.add(d, "Ok", null_result);
  worker w{cfg, std::move(reg)};
  try {
    w.start();
    FAIL() << "start() succeeded on a port in use";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string{e.what()}.find("cannot listen on 127.0.0.1:"
                                         + std::to_string(port)),
              std::string::npos)
      << e.what();
  }
  EXPECT_FALSE(w.is_running());
  EXPECT_EQ(w.http_port(), 0);
}
