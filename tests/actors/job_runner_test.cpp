// Deterministic tests of the singleton job runner (CAF test coordinator):
// every job runs at the start and then at its own interval; each attempt is
// counted by its outcome (ran, skipped because another replica holds the
// lock, failed); a failed run is tried again at the next interval, and runs
// missed by a slow run are skipped, not run back to back; a run that says
// more work is left is followed after the job's busy interval. The database is
// replaced by a fake attempt function.

#define CAF_SUITE actors.job_runner
#include "cmdbus/actors/worker/job_runner.hpp"

#include <caf/test/dsl.hpp>

#include <deque>

using namespace cmdbus;
using namespace cmdbus::actors;
using namespace std::chrono_literals;

namespace {

// What the fake database answers, per job: queued outcomes (then "ran").
struct fake_db {
  std::vector<std::string> attempts;
  std::map<std::string, std::deque<db::job_outcome>> next;
  /// Per job, whether its next runs say more work is left (then none).
  std::map<std::string, std::deque<bool>> more;

  db::job_result attempt(const job_definition& def) {
    attempts.push_back(def.name);
    db::job_result res;
    res.outcome = db::job_outcome::ran;
    auto& q = next[def.name];
    if (!q.empty()) {
      res.outcome = q.front();
      q.pop_front();
    }
    if (res.outcome == db::job_outcome::failed)
      res.error = "boom";
    auto& m = more[def.name];
    if (res.outcome == db::job_outcome::ran && !m.empty()) {
      res.more = m.front();
      m.pop_front();
    }
    return res;
  }
};

job_entry entry(const std::string& name, std::chrono::milliseconds interval) {
  return {std::make_shared<const job_definition>(
            job_definition{name, interval, [](job_context&) {}}),
          std::make_shared<job_metrics>(name)};
}

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<fake_db> dbs = std::make_shared<fake_db>();
  job_runner_settings settings;
  job_runner_actor aut;

  ~fixture() {
    if (aut)
      caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
    sched.run();
  }

  void start() {
    auto d = dbs;
    aut = sys.spawn(job_runner, settings,
                    job_attempt_fn{[d](const job_definition& def) {
                      return d->attempt(def);
                    }});
    sched.run();
  }

  job_metrics& metrics(size_t i) {
    return *settings.jobs[i].metrics;
  }

  std::chrono::steady_clock::duration elapsed() {
    return sched.clock().current_time - start_time;
  }

  std::chrono::steady_clock::time_point start_time = sched.clock().current_time;
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(job_runner_tests, fixture)

CAF_TEST(every job runs at the start and then at its own interval) {
  settings.jobs = {entry("a", 100ms), entry("b", 250ms)};
  start();
  CAF_CHECK_EQUAL(dbs->attempts, (std::vector<std::string>{"a", "b"}));
  // The timer fires at the earliest due job: a at 100, 200 ms, then b at
  // 250 ms, a at 300 ms.
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_CHECK(elapsed() == 100ms);
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_CHECK(elapsed() == 250ms);
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_CHECK(elapsed() == 300ms);
  CAF_CHECK_EQUAL(dbs->attempts,
                  (std::vector<std::string>{"a", "b", "a", "a", "b", "a"}));
  CAF_CHECK_EQUAL(metrics(0).ran.load(), 4);
  CAF_CHECK_EQUAL(metrics(1).ran.load(), 2);
  CAF_CHECK_EQUAL(metrics(0).failed.load(), 0);
}

CAF_TEST(a run that says more is left runs again after the busy interval) {
  settings.jobs = {{std::make_shared<const job_definition>(job_definition{
                      "chunks", 1000ms, [](job_context&) {}, 10ms}),
                    std::make_shared<job_metrics>("chunks")}};
  dbs->more["chunks"] = {true, true};
  start();
  // Two runs said more: each next one follows after 10 ms; the third said
  // none, and the job waits for its interval from there.
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_CHECK(elapsed() == 10ms);
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_CHECK(elapsed() == 20ms);
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_CHECK(elapsed() == 1020ms);
  CAF_CHECK_EQUAL(metrics(0).ran.load(), 4);
}

CAF_TEST(a failed run is counted and the job runs again at its next interval) {
  settings.jobs = {entry("a", 100ms)};
  dbs->next["a"] = {db::job_outcome::failed};
  start();
  CAF_CHECK_EQUAL(metrics(0).failed.load(), 1);
  CAF_CHECK_EQUAL(metrics(0).ran.load(), 0);
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_CHECK(elapsed() == 100ms);
  CAF_CHECK_EQUAL(metrics(0).failed.load(), 1);
  CAF_CHECK_EQUAL(metrics(0).ran.load(), 1);
}

CAF_TEST(a run skipped for the lock is counted and tried again) {
  settings.jobs = {entry("a", 100ms)};
  dbs->next["a"] = {db::job_outcome::skipped, db::job_outcome::skipped};
  start();
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_REQUIRE(sched.trigger_timeout());
  sched.run();
  CAF_CHECK_EQUAL(metrics(0).skipped.load(), 2);
  CAF_CHECK_EQUAL(metrics(0).ran.load(), 1);
  CAF_CHECK_EQUAL(dbs->attempts.size(), 3u);
}

CAF_TEST(runs missed while a run was slow are skipped) {
  auto t0 = std::chrono::steady_clock::time_point{} + 1000ms;
  // On time: one interval after the due time.
  CAF_CHECK(next_due_after(t0, t0 + 10ms, 100ms) == t0 + 100ms);
  // A run that ended 350 ms late: the next one interval after its end,
  // not three catch-up runs.
  CAF_CHECK(next_due_after(t0, t0 + 350ms, 100ms) == t0 + 450ms);
}

CAF_TEST_FIXTURE_SCOPE_END()
