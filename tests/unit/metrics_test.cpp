// The worker's metrics without a worker: the duration histogram, per-type
// tallies (and their bound for unregistered types), the Prometheus text of
// a snapshot, the status page and the health and readiness bodies.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cmdbus/actors/ops/exposition.hpp"
#include "cmdbus/actors/ops/metrics.hpp"
#include "cmdbus/actors/ops/status_page.hpp"

namespace cmdbus {
namespace {

using namespace std::chrono_literals;

TEST(Metrics, HistogramBucketsAreCumulativeUpperBounds) {
  duration_histogram h;
  h.observe(500us); // le 0.001
  h.observe(1ms);   // le 0.001 (bounds are inclusive)
  h.observe(3ms);   // le 0.005
  h.observe(90s);   // +Inf
  auto s = h.read();
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.cumulative[0], 2);                           // 0.001
  EXPECT_EQ(s.cumulative[1], 2);                           // 0.0025
  EXPECT_EQ(s.cumulative[2], 3);                           // 0.005
  EXPECT_EQ(s.cumulative[duration_buckets.size() - 1], 3); // 60
  EXPECT_EQ(s.cumulative[duration_buckets.size()], 4);     // +Inf
  EXPECT_DOUBLE_EQ(s.sum_seconds, 0.0005 + 0.001 + 0.003 + 90);
}

TEST(Metrics, UnregisteredTypesAreBounded) {
  domain_metrics m{"d", 4, {"Known"}};
  m.of("Known").completed += 1;
  for (size_t i = 0; i < domain_metrics::max_unregistered_types + 10; ++i)
    m.of("Odd" + std::to_string(i)).failed += 1;
  size_t types = 0;
  int64_t other = 0;
  m.for_each_type([&](const std::string& name, const type_metrics& t) {
    ++types;
    if (name == "other")
      other = t.failed.load();
  });
  EXPECT_EQ(types, 1 + domain_metrics::max_unregistered_types + 1);
  EXPECT_EQ(other, 10);
  EXPECT_EQ(
    m.finished(),
    1 + static_cast<int64_t>(domain_metrics::max_unregistered_types + 10));
  EXPECT_EQ(&m.of("Known"), &m.of("Known"));
}

TEST(Metrics, SampleValuesAndLabelEscapes) {
  EXPECT_EQ(sample_value(0), "0");
  EXPECT_EQ(sample_value(42), "42");
  EXPECT_EQ(sample_value(0.25), "0.25");
  EXPECT_EQ(sample_value(0.1), "0.1");
  EXPECT_EQ(sample_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(sample_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(sample_value(std::nan("")), "NaN");
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

status_snapshot sample_snapshot() {
  status_snapshot s;
  s.version = "1.2.3";
  s.state = health_state::degraded;
  s.ready = true;
  s.readiness = "ready";
  domain_status d;
  d.health.domain = "payments";
  d.health.state = health_state::degraded;
  d.health.reasons = {"12 consecutive handler failures"};
  d.polling = true;
  d.received = 20;
  d.in_flight = 3;
  d.slots = 8;
  d.remote_slots = 6;
  d.remote_pools = 2;
  d.remote_disconnects = 1;
  d.schedule_fired = 4;
  d.schedule_lateness_us = 250000;
  d.schedule_last_lateness_us = 12000;
  d.db_errors = {1, 0, 2};
  type_status t;
  t.command_type = "Debit \"x\"";
  t.completed = 7;
  t.failed = 1;
  t.retried = 2;
  t.moved_to_tsq = 3;
  duration_histogram h;
  h.observe(2ms);
  h.observe(20ms);
  t.duration = h.read();
  d.types.push_back(t);
  d.finished_per_second = 2.5;
  db::queue_figures q;
  q.domain = "payments";
  q.queue = "payments__commands";
  q.queue_exists = true;
  q.depth = 9;
  q.visible = 6;
  q.scheduled = 2;
  q.oldest_visible_age_sec = 4.25;
  q.tsq = 3;
  d.queue = q;
  s.domains.push_back(d);
  return s;
}

TEST(Metrics, ExpositionHasEveryFamilyWithItsSamples) {
  auto text = render_metrics(sample_snapshot());
  auto has = [&text](const std::string& line) {
    return text.find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has("# TYPE cmdbus_commands_total counter"));
  EXPECT_TRUE(has("cmdbus_commands_total{domain=\"payments\",command_type="
                  "\"Debit \\\"x\\\"\",outcome=\"completed\"} 7"));
  EXPECT_TRUE(has("cmdbus_commands_total{domain=\"payments\",command_type="
                  "\"Debit \\\"x\\\"\",outcome=\"moved_to_tsq\"} 3"));
  EXPECT_TRUE(has("cmdbus_commands_received_total{domain=\"payments\"} 20"));
  EXPECT_TRUE(has("# TYPE cmdbus_handler_duration_seconds histogram"));
  EXPECT_TRUE(has("cmdbus_handler_duration_seconds_bucket{domain=\"payments\","
                  "command_type=\"Debit \\\"x\\\"\",le=\"0.0025\"} 1"));
  EXPECT_TRUE(has("cmdbus_handler_duration_seconds_bucket{domain=\"payments\","
                  "command_type=\"Debit \\\"x\\\"\",le=\"+Inf\"} 2"));
  EXPECT_TRUE(has("cmdbus_handler_duration_seconds_count{domain=\"payments\","
                  "command_type=\"Debit \\\"x\\\"\"} 2"));
  EXPECT_TRUE(has("cmdbus_in_flight{domain=\"payments\"} 3"));
  EXPECT_TRUE(has("cmdbus_handler_slots{domain=\"payments\"} 8"));
  EXPECT_TRUE(has("cmdbus_queue_depth{queue=\"payments__commands\"} 9"));
  EXPECT_TRUE(has("cmdbus_queue_visible{queue=\"payments__commands\"} 6"));
  EXPECT_TRUE(has("cmdbus_queue_scheduled{queue=\"payments__commands\"} 2"));
  EXPECT_TRUE(has("cmdbus_queue_oldest_visible_age_seconds{queue=\"payments__"
                  "commands\"} 4.25"));
  EXPECT_TRUE(has("cmdbus_tsq_commands{domain=\"payments\"} 3"));
  EXPECT_TRUE(
    has("cmdbus_db_errors_total{domain=\"payments\",actor=\"poller\"} 1"));
  EXPECT_TRUE(has("cmdbus_db_errors_total{domain=\"payments\",actor=\"retry_"
                  "scheduler\"} 2"));
  EXPECT_TRUE(has("cmdbus_handler_restarts_total{domain=\"payments\"} 0"));
  EXPECT_TRUE(has("cmdbus_remote_slots{domain=\"payments\"} 6"));
  EXPECT_TRUE(has("cmdbus_remote_pools{domain=\"payments\"} 2"));
  EXPECT_TRUE(has("cmdbus_remote_disconnects_total{domain=\"payments\"} 1"));
  EXPECT_TRUE(has("cmdbus_schedule_fired_total{domain=\"payments\"} 4"));
  EXPECT_TRUE(
    has("cmdbus_schedule_lateness_seconds_sum{domain=\"payments\"} 0.25"));
  EXPECT_TRUE(
    has("cmdbus_schedule_last_lateness_seconds{domain=\"payments\"} 0.012"));
  EXPECT_TRUE(has("cmdbus_health{domain=\"payments\"} 1"));
  EXPECT_TRUE(has("cmdbus_queue_figures_up 1"));
  EXPECT_TRUE(has("cmdbus_ready 1"));
  EXPECT_TRUE(has("cmdbus_build_info{version=\"1.2.3\"} 1"));
  // Each family declared once.
  size_t pos = 0;
  int n = 0;
  while ((pos = text.find("# TYPE cmdbus_health ", pos)) != std::string::npos) {
    ++n;
    ++pos;
  }
  EXPECT_EQ(n, 1);
}

TEST(Metrics, MissingQueueFiguresLeaveTheirGaugesOut) {
  auto s = sample_snapshot();
  s.domains[0].queue.reset();
  s.queue_error = "connection refused";
  auto text = render_metrics(s);
  EXPECT_EQ(text.find("cmdbus_queue_depth{"), std::string::npos);
  EXPECT_EQ(text.find("cmdbus_tsq_commands{"), std::string::npos);
  EXPECT_NE(text.find("cmdbus_queue_figures_up 0\n"), std::string::npos);
}

TEST(StatusPage, ShowsHealthReasonsFiguresAndEscapesText) {
  auto s = sample_snapshot();
  s.domains[0].health.reasons.push_back("<script>");
  auto page = render_status_page(s);
  EXPECT_NE(page.find("<meta http-equiv=\"refresh\" content=\"2\">"),
            std::string::npos);
  EXPECT_NE(page.find("<title>cmdbus worker: DEGRADED</title>"),
            std::string::npos);
  EXPECT_NE(page.find("<li>12 consecutive handler failures</li>"),
            std::string::npos);
  EXPECT_NE(page.find("<li>&lt;script&gt;</li>"), std::string::npos);
  EXPECT_EQ(page.find("<script>"), std::string::npos);
  EXPECT_NE(page.find("data-field=\"in-flight\">3</span>"), std::string::npos);
  EXPECT_NE(page.find("data-field=\"slots\">8</span>"), std::string::npos);
  EXPECT_NE(page.find("data-field=\"throughput\">2.5 /s</td>"),
            std::string::npos);
  EXPECT_NE(page.find("data-field=\"queue-depth\">9</td>"), std::string::npos);
  EXPECT_NE(page.find("data-field=\"oldest-age\">4.2 s</td>"),
            std::string::npos);
  EXPECT_NE(page.find("data-field=\"tsq\">3</td>"), std::string::npos);
  EXPECT_NE(page.find("<td>Debit &quot;x&quot;</td>"), std::string::npos);
  // Nothing from elsewhere.
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

TEST(Metrics, LiveProcessesByTypeAndStatus) {
  auto s = sample_snapshot();
  EXPECT_EQ(render_metrics(s).find("cmdbus_processes"), std::string::npos);
  s.has_processes = true;
  s.processes = {{"payments", "Refund", "WAITING", 4},
                 {"payments", "Refund", "WAITING_FOR_TSQ", 1}};
  auto text = render_metrics(s);
  EXPECT_NE(text.find("# TYPE cmdbus_processes gauge\n"), std::string::npos);
  EXPECT_NE(text.find("cmdbus_processes{domain=\"payments\",process_type="
                      "\"Refund\",status=\"WAITING_FOR_TSQ\"} 1\n"),
            std::string::npos);
  auto page = render_status_page(s);
  EXPECT_NE(page.find("<td>payments</td><td>Refund</td><td>WAITING</td><td "
                      "class=\"num\">4</td>"),
            std::string::npos);
  s.processes.clear();
  EXPECT_NE(render_status_page(s).find("<td colspan=\"4\">none</td>"),
            std::string::npos);
}

TEST(StatusPage, HealthAndReadinessBodies) {
  auto s = sample_snapshot();
  EXPECT_EQ(render_health_json(s),
            "{\"status\":\"DEGRADED\",\"domains\":[{\"domain\":\"payments\","
            "\"status\":\"DEGRADED\",\"reasons\":[\"12 consecutive handler "
            "failures\"]}]}");
  s.ready = false;
  s.readiness = "draining";
  EXPECT_EQ(render_ready_json(s),
            "{\"ready\":false,\"state\":\"draining\",\"domains\":[{\"domain\":"
            "\"payments\",\"polling\":true}]}");
}

} // namespace
} // namespace cmdbus
