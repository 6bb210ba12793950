// The worker's health evaluation (actors/ops/health.hpp): thresholds, reset on
// success, recovery and the worst of the domains, without a database.

#include "cmdbus/actors/ops/health.hpp"

#include <gtest/gtest.h>

namespace cmdbus {
namespace {

domain_health_inputs failures(int64_t n) {
  domain_health_inputs in;
  in.consecutive_failures = n;
  return in;
}

TEST(Health, NoInputIsHealthy) {
  auto h = evaluate("d", {});
  EXPECT_EQ(h.state, health_state::healthy);
  EXPECT_TRUE(h.reasons.empty());
  EXPECT_EQ(h.domain, "d");
}

TEST(Health, ConsecutiveFailuresDegradeAtTheThreshold) {
  auto n = health_limits::degraded_consecutive_failures;
  EXPECT_EQ(evaluate("d", failures(n - 1)).state, health_state::healthy);
  auto h = evaluate("d", failures(n + 2));
  EXPECT_EQ(h.state, health_state::degraded);
  ASSERT_EQ(h.reasons.size(), 1u);
  EXPECT_EQ(h.reasons[0],
            std::to_string(n + 2) + " consecutive handler failures");
  EXPECT_EQ(h.figures.consecutive_failures, n + 2);
}

TEST(Health, ASuccessResetsTheStreakAndRecovers) {
  domain_health_counters c;
  c.consecutive_failures = health_limits::degraded_consecutive_failures;
  EXPECT_EQ(evaluate("d", read_inputs(c, 1000)).state, health_state::degraded);
  c.consecutive_failures.store(0); // what the supervisor does on a success
  EXPECT_EQ(evaluate("d", read_inputs(c, 1000)).state, health_state::healthy);
}

TEST(Health, AnOutageDegradesThenBecomesCritical) {
  domain_health_counters c;
  c.outage_began(10000);
  c.outage_began(12000); // a second session of the domain fails later
  auto early = read_inputs(c, 18000);
  EXPECT_EQ(early.failing_sessions, 2);
  EXPECT_EQ(early.db_unavailable_ms, 8000);
  auto h = evaluate("d", early);
  EXPECT_EQ(h.state, health_state::degraded);
  ASSERT_EQ(h.reasons.size(), 1u);
  EXPECT_EQ(h.reasons[0], "database unavailable for 8s");
  auto late = read_inputs(c, 10000 + health_limits::critical_db_outage_ms);
  EXPECT_EQ(evaluate("d", late).state, health_state::critical);
  // Recovery: healthy only when every failing session works again.
  c.outage_ended();
  EXPECT_EQ(evaluate("d", read_inputs(c, 50000)).state, health_state::critical);
  c.outage_ended();
  auto after = read_inputs(c, 50000);
  EXPECT_EQ(after.db_unavailable_ms, 0);
  EXPECT_EQ(evaluate("d", after).state, health_state::healthy);
  // A new outage is timed from its own start.
  c.outage_began(60000);
  EXPECT_EQ(read_inputs(c, 61000).db_unavailable_ms, 1000);
}

TEST(Health, ReasonsAccumulateAndTheWorstStateWins) {
  domain_health_inputs in = failures(
    health_limits::degraded_consecutive_failures);
  in.failing_sessions = 1;
  in.db_unavailable_ms = health_limits::critical_db_outage_ms;
  auto h = evaluate("d", in);
  EXPECT_EQ(h.state, health_state::critical);
  EXPECT_EQ(h.reasons.size(), 2u);
}

TEST(Health, TheWorkerIsTheWorstOfItsDomains) {
  EXPECT_EQ(combine({}).state, health_state::healthy);
  auto ok = evaluate("a", {});
  auto bad = evaluate("b",
                      failures(health_limits::degraded_consecutive_failures));
  auto w = combine({ok, bad, ok});
  EXPECT_EQ(w.state, health_state::degraded);
  EXPECT_EQ(w.domains.size(), 3u);
  EXPECT_EQ(combine({ok, ok}).state, health_state::healthy);
  EXPECT_STREQ(to_string(health_state::critical), "CRITICAL");
  EXPECT_STREQ(to_string(health_state::degraded), "DEGRADED");
  EXPECT_STREQ(to_string(health_state::healthy), "HEALTHY");
}

TEST(Health, StuckHandlersDegradeThenBecomeCritical) {
  domain_health_inputs in;
  in.stuck_handlers = 1;
  auto h = evaluate("d", in);
  EXPECT_EQ(h.state, health_state::degraded);
  ASSERT_EQ(h.reasons.size(), 1u);
  EXPECT_EQ(h.reasons[0], "1 handler(s) stuck past visibility timeout + 5s");
  in.stuck_handlers = health_limits::critical_stuck_handlers;
  EXPECT_EQ(evaluate("d", in).state, health_state::critical);
  in.stuck_handlers = 0; // they returned
  EXPECT_EQ(evaluate("d", in).state, health_state::healthy);
}

TEST(Health, StalledWritersDegrade) {
  domain_health_inputs in;
  in.stalled_writers = 2;
  auto h = evaluate("d", in);
  EXPECT_EQ(h.state, health_state::degraded);
  EXPECT_EQ(h.reasons, (std::vector<std::string>{
                         "2 side-effect writer(s) not committing for 10s"}));
}

TEST(Health, ARestartingDomainDegradesAndRepeatedRestartsAreCritical) {
  domain_health_counters c;
  c.restarting = true;
  c.restarts = 1;
  auto h = evaluate("d", read_inputs(c, 0));
  EXPECT_EQ(h.state, health_state::degraded);
  EXPECT_EQ(h.reasons,
            (std::vector<std::string>{"domain restarting (1 restart(s) in a "
                                      "row)"}));
  c.restarts = health_limits::critical_restarts;
  EXPECT_EQ(evaluate("d", read_inputs(c, 0)).state, health_state::critical);
  c.restarting = false; // started again
  EXPECT_EQ(evaluate("d", read_inputs(c, 0)).state, health_state::healthy);
}

TEST(Health, StoppingClearsWhatRanButKeepsFailuresInARow) {
  domain_health_counters c;
  c.stuck_handlers = 3;
  c.stalled_writers = 1;
  c.restarting = true;
  c.restarts = 5;
  c.consecutive_failures = 11;
  c.clear_running();
  auto in = read_inputs(c, 0);
  EXPECT_EQ(in.stuck_handlers, 0);
  EXPECT_EQ(in.stalled_writers, 0);
  EXPECT_FALSE(in.restarting);
  EXPECT_EQ(in.restarts, 0);
  EXPECT_EQ(in.consecutive_failures, 11);
}

TEST(Health, APollerWithCreditsThatStopsReadingIsStale) {
  domain_health_counters c;
  c.poller_stale_after_ms = 2000;
  EXPECT_FALSE(c.polling());
  c.poller_read(1000, 4);
  EXPECT_TRUE(c.polling());
  EXPECT_EQ(evaluate("d", read_inputs(c, 2999)).state, health_state::healthy);
  auto h = evaluate("d", read_inputs(c, 4500));
  EXPECT_EQ(h.state, health_state::degraded);
  EXPECT_EQ(h.reasons, (std::vector<std::string>{
                         "poller has not read for 3s with free slots"}));
  // A read recovers it.
  c.poller_read(4600, 4);
  EXPECT_EQ(evaluate("d", read_inputs(c, 4700)).state, health_state::healthy);
}

TEST(Health, APollerWithoutCreditsIsNotStale) {
  // Every slot busy: not reading is right. Credits coming back start the
  // clock again.
  domain_health_counters c;
  c.poller_stale_after_ms = 2000;
  c.poller_read(1000, 0);
  EXPECT_EQ(evaluate("d", read_inputs(c, 60000)).state, health_state::healthy);
  c.poller_credited(60000, 2);
  EXPECT_EQ(evaluate("d", read_inputs(c, 61000)).state, health_state::healthy);
  EXPECT_EQ(evaluate("d", read_inputs(c, 62500)).state, health_state::degraded);
}

TEST(Health, APollerInADatabaseOutageIsNotReportedStale) {
  // The outage is the reason; the poller waits for its backoff.
  domain_health_counters c;
  c.poller_stale_after_ms = 2000;
  c.poller_read(1000, 4);
  c.outage_began(1500);
  auto h = evaluate("d", read_inputs(c, 9000));
  ASSERT_EQ(h.reasons.size(), 1u);
  EXPECT_EQ(h.reasons[0].rfind("database unavailable for ", 0), 0u);
}

TEST(Health, StaleCheckOffAndStoppedPollersAreNeverStale) {
  domain_health_counters c;
  c.poller_read(1000, 4);
  EXPECT_EQ(evaluate("d", read_inputs(c, 600000)).state,
            health_state::healthy); // off (tick mode)
  c.poller_stale_after_ms = 2000;
  c.clear_running();
  EXPECT_FALSE(c.polling());
  EXPECT_EQ(evaluate("d", read_inputs(c, 600000)).state,
            health_state::healthy);
}

} // namespace
} // namespace cmdbus
