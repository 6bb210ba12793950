// The status view without a worker: build_status copies every domain's
// figures from its metrics and health (the one definition of "finished":
// completed, failed or moved to the TSQ, never a retry), and the status
// page, /metrics and the admin actor's JSON render that one view, so they
// show one throughput; the throughput window and its sampler.

#include <gtest/gtest.h>

#include <atomic>

#include <rapidjson/document.h>

#include "cmdbus/actors/ops/admin_view.hpp"
#include "cmdbus/actors/ops/exposition.hpp"
#include "cmdbus/actors/ops/status_page.hpp"
#include "cmdbus/actors/ops/status_snapshot.hpp"
#include "cmdbus/actors/ops/throughput.hpp"
#include "tests/support/eventually.hpp"

namespace cmdbus {
namespace {

using namespace std::chrono_literals;

// A domain with outcomes of every kind, retries among them.
std::unique_ptr<domain_metrics> busy_domain(const std::string& name) {
  auto m = std::make_unique<domain_metrics>(
    name, 8, std::vector<std::string>{"Debit", "Credit"});
  m->of("Debit").completed += 10;
  m->of("Debit").retried += 6;
  m->of("Credit").failed += 2;
  m->of("Credit").moved_to_tsq += 1;
  m->of("Credit").retried += 4;
  m->of("Unknown").moved_to_tsq += 1;
  m->received += 30;
  m->in_flight += 3;
  m->handler_restarts += 1;
  m->remote_slots += 6;
  m->remote_pools += 2;
  m->remote_disconnects += 1;
  m->db_errors(db_actor::poller) += 2;
  m->db_errors(db_actor::retry_scheduler) += 1;
  m->other_db_errors += 4;
  m->rejected += 5;
  m->stale += 1;
  return m;
}

domain_health health_of(const std::string& domain, int64_t failures) {
  domain_health_inputs in;
  in.consecutive_failures = failures;
  return evaluate(domain, in);
}

status_inputs inputs_of(const std::vector<const domain_metrics*>& ms) {
  status_inputs in;
  in.version = "9.9.9";
  in.ready = true;
  in.readiness = "ready";
  in.uptime_seconds = 12;
  for (auto* m : ms) {
    domain_source d;
    d.metrics = m;
    d.health = health_of(m->domain(), 0);
    d.polling = true;
    d.configured_pools = {"10.0.0.7:7400", "10.0.0.8:7400"};
    in.domains.push_back(std::move(d));
  }
  return in;
}

rapidjson::Document parse(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  EXPECT_FALSE(doc.HasParseError()) << text;
  return doc;
}

TEST(StatusView, FinishedCountsFinalOutcomesOnly) {
  auto m = busy_domain("payments");
  auto t = m->totals();
  EXPECT_EQ(t.completed, 10);
  EXPECT_EQ(t.failed, 2);
  EXPECT_EQ(t.retried, 10);
  EXPECT_EQ(t.moved_to_tsq, 2);
  EXPECT_EQ(t.finished(), 14);
  EXPECT_EQ(m->finished(), 14);
  EXPECT_EQ(m->all_db_errors(), 7);
}

TEST(StatusView, BuildCopiesTheFiguresOfEveryDomain) {
  auto a = busy_domain("payments");
  auto b = std::make_unique<domain_metrics>("audit", 4,
                                            std::vector<std::string>{"Log"});
  auto in = inputs_of({a.get(), b.get()});
  in.domains[0].finished_per_second = 2.5;
  in.domains[1].health = health_of("audit", 12);
  in.domains[1].polling = false;
  auto s = build_status(in);
  EXPECT_EQ(s.version, "9.9.9");
  EXPECT_TRUE(s.ready);
  EXPECT_EQ(s.readiness, "ready");
  EXPECT_DOUBLE_EQ(s.uptime_seconds, 12);
  // The worst domain's health.
  EXPECT_EQ(s.state, health_state::degraded);
  ASSERT_EQ(s.domains.size(), 2u);
  auto& d = s.domains[0];
  EXPECT_EQ(d.health.domain, "payments");
  EXPECT_EQ(d.health.state, health_state::healthy);
  EXPECT_TRUE(d.polling);
  EXPECT_EQ(d.received, 30);
  EXPECT_EQ(d.in_flight, 3);
  EXPECT_EQ(d.slots, 8);
  EXPECT_EQ(d.handler_restarts, 1);
  EXPECT_EQ(d.remote_slots, 6);
  EXPECT_EQ(d.remote_pools, 2);
  EXPECT_EQ(d.remote_disconnects, 1);
  EXPECT_EQ(d.configured_pools.size(), 2u);
  EXPECT_EQ(d.db_errors, (std::array<int64_t, 3>{2, 0, 1}));
  EXPECT_EQ(d.finished, 14);
  ASSERT_TRUE(d.finished_per_second);
  EXPECT_DOUBLE_EQ(*d.finished_per_second, 2.5);
  EXPECT_FALSE(d.queue);
  // Every type by name, registered or not.
  ASSERT_EQ(d.types.size(), 3u);
  EXPECT_EQ(d.types[0].command_type, "Credit");
  EXPECT_EQ(d.types[0].failed, 2);
  EXPECT_EQ(d.types[0].retried, 4);
  EXPECT_EQ(d.types[1].command_type, "Debit");
  EXPECT_EQ(d.types[1].completed, 10);
  EXPECT_EQ(d.types[2].command_type, "Unknown");
  EXPECT_EQ(d.types[2].moved_to_tsq, 1);
  auto& e = s.domains[1];
  EXPECT_EQ(e.health.state, health_state::degraded);
  EXPECT_FALSE(e.polling);
  EXPECT_EQ(e.finished, 0);
  EXPECT_FALSE(e.finished_per_second);
}

TEST(StatusView, PageMetricsAndAdminShowOneView) {
  auto a = busy_domain("payments");
  auto b = busy_domain("ledger");
  auto in = inputs_of({a.get(), b.get()});
  in.domains[0].finished_per_second = 2.5;
  in.domains[1].finished_per_second = 1.25;
  auto s = build_status(in);
  // The status page.
  auto page = render_status_page(s);
  EXPECT_NE(page.find("data-field=\"throughput\">2.5 /s<"), std::string::npos)
    << page;
  EXPECT_NE(page.find("data-field=\"throughput\">1.2 /s<"), std::string::npos)
    << page;
  // /metrics: the outcomes behind it.
  auto text = render_metrics(s);
  EXPECT_NE(text.find("cmdbus_commands_total{domain=\"payments\",command_"
                      "type=\"Debit\",outcome=\"retried\"} 6\n"),
            std::string::npos)
    << text;
  // The admin actor's JSON: the same figures, the worker's throughput the
  // sum of its domains'.
  admin::source src;
  src.kind = "worker";
  src.name = [] { return std::string{"host/42"}; };
  auto v = admin::view_of(s);
  EXPECT_EQ(v.finished, 28);
  auto doc = parse(admin::status_json(src, v));
  EXPECT_EQ(std::string{doc["kind"].GetString()}, "worker");
  EXPECT_EQ(std::string{doc["readiness"].GetString()}, "ready");
  EXPECT_EQ(std::string{doc["health"].GetString()}, "healthy");
  EXPECT_EQ(doc["slots"]["local"].GetInt64(), 16);
  EXPECT_EQ(doc["slots"]["remote"].GetInt64(), 12);
  EXPECT_EQ(doc["in_flight"].GetInt64(), 6);
  EXPECT_DOUBLE_EQ(doc["throughput_1m"].GetDouble(), 3.75);
  EXPECT_FALSE(doc.HasMember("sessions"));
  auto& ds = doc["domains"];
  ASSERT_EQ(ds.Size(), 2u);
  EXPECT_EQ(std::string{ds[0]["domain"].GetString()}, "payments");
  EXPECT_EQ(std::string{ds[0]["health"].GetString()}, "healthy");
  EXPECT_DOUBLE_EQ(ds[0]["throughput_1m"].GetDouble(), 2.5);
  EXPECT_DOUBLE_EQ(ds[1]["throughput_1m"].GetDouble(), 1.25);
  EXPECT_EQ(ds[0]["remote_pools"]["connected"].GetInt64(), 2);
  EXPECT_EQ(ds[0]["remote_pools"]["configured"].Size(), 2u);
}

TEST(StatusView, AnUnknownThroughputIsNullEverywhere) {
  auto a = busy_domain("payments");
  auto b = busy_domain("ledger");
  auto in = inputs_of({a.get(), b.get()});
  in.domains[0].finished_per_second = 2.5;
  auto s = build_status(in);
  EXPECT_NE(render_status_page(s).find("data-field=\"throughput\">&ndash;<"),
            std::string::npos);
  admin::source src;
  src.kind = "worker";
  auto doc = parse(admin::status_json(src, admin::view_of(s)));
  // The worker's figure needs every domain's.
  EXPECT_TRUE(doc["throughput_1m"].IsNull());
  EXPECT_DOUBLE_EQ(doc["domains"][0]["throughput_1m"].GetDouble(), 2.5);
  EXPECT_TRUE(doc["domains"][1]["throughput_1m"].IsNull());
}

TEST(Throughput, WindowRatesOverItsSamples) {
  using clock = throughput_window::clock;
  throughput_window w{60s};
  auto t0 = clock::time_point{} + 1h;
  EXPECT_TRUE(w.rates().empty());
  w.add(t0, {0, 100});
  EXPECT_FALSE(w.rate(0));
  w.add(t0 + 2s, {20, 100});
  ASSERT_TRUE(w.rate(0));
  EXPECT_DOUBLE_EQ(*w.rate(0), 10);
  EXPECT_DOUBLE_EQ(*w.rate(1), 0);
  EXPECT_FALSE(w.rate(2));
  // A minute on: the oldest sample kept is the last one a minute or more
  // before the newest.
  for (int i = 3; i <= 62; ++i)
    w.add(t0 + std::chrono::seconds{i}, {10 * i, 100});
  auto rates = w.rates();
  ASSERT_EQ(rates.size(), 2u);
  ASSERT_TRUE(rates[0]);
  EXPECT_DOUBLE_EQ(*rates[0], 10);
  w.add(t0 + 70s, {620, 100});
  // From t0 + 10 s (count 100) to t0 + 70 s: 520 in 60 s.
  EXPECT_DOUBLE_EQ(*w.rate(0), 520.0 / 60);
}

TEST(Throughput, SamplerFeedsEveryReaderTheSameRates) {
  std::atomic<int64_t> n{0};
  throughput_sampler sampler{[&n] {
                               auto x = n += 7;
                               return std::vector<int64_t>{x, 2 * x};
                             },
                             10ms};
  std::vector<std::optional<double>> rates;
  ASSERT_TRUE(test::eventually([&] {
    rates = sampler.rates();
    return rates.size() == 2 && rates[0] && *rates[0] > 0;
  }));
  ASSERT_TRUE(rates[1]);
  EXPECT_DOUBLE_EQ(*rates[1], 2 * *rates[0]);
}

} // namespace
} // namespace cmdbus
