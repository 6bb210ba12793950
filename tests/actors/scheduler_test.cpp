// Deterministic tests of the scheduler (CAF test coordinator): it fires at
// start, then sleeps until the earliest next slot of its domains (at most
// max_sleep, to find schedules added meanwhile), fires a full batch's rest
// at once, polls briefly while a due schedule is held by another worker,
// retries a failing domain after its backoff while the others go on, and
// ignores wakeups of older timers. The database is a fake store.

#define CAF_SUITE actors.scheduler
#include "cmdbus/actors/worker/scheduler.hpp"

#include <caf/test/dsl.hpp>

#include <deque>

#include "cmdbus/db/error.hpp"

using namespace cmdbus;
using namespace cmdbus::actors;
using namespace std::chrono_literals;

namespace {

// The schedules behind the fake store, per domain.
struct fake_domain {
  /// What each fire returns, in turn (then: nothing claimed).
  std::deque<schedules::fire_result> results;
  /// What until_next answers.
  std::optional<std::chrono::microseconds> until;
  /// Calls that fail (a lost connection) before calls succeed again.
  int fail_next = 0;
  int fires = 0;
  int failures = 0;
  int successes = 0;
};

class fake_store : public schedule_store {
public:
  std::map<std::string, fake_domain> domains;

  schedules::fire_result fire(const std::string& domain, int) override {
    auto& d = domains[domain];
    ++d.fires;
    if (d.fail_next > 0) {
      --d.fail_next;
      throw db::error{db::errc::connection, "", "connection lost"};
    }
    if (d.results.empty())
      return {};
    auto r = d.results.front();
    d.results.pop_front();
    return r;
  }

  std::optional<std::chrono::microseconds>
  until_next(const std::string& domain) override {
    return domains[domain].until;
  }

  std::chrono::milliseconds failed(const std::string& domain,
                                   const std::exception&) override {
    ++domains[domain].failures;
    return 200ms;
  }

  void succeeded(const std::string& domain) override {
    ++domains[domain].successes;
  }
};

schedules::fire_result fired(int claimed, int sent) {
  schedules::fire_result r;
  r.claimed = claimed;
  for (int i = 0; i < sent; ++i) {
    schedules::fired_slot f;
    f.name = "s" + std::to_string(i);
    f.command_id = uuid::random();
    f.lateness = 3ms;
    r.slots.push_back(f);
  }
  return r;
}

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<fake_store> store = std::make_shared<fake_store>();
  scheduler_settings settings;
  std::shared_ptr<domain_metrics> metrics_a = std::make_shared<domain_metrics>(
    "a", 1, std::vector<std::string>{});
  scheduler_actor aut;

  fixture() {
    settings.domains = {"a", "b"};
    settings.metrics["a"] = metrics_a;
    settings.batch = 10;
  }

  ~fixture() {
    if (aut)
      caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
    sched.run();
  }

  void start(caf::actor_addr watched = {}) {
    aut = sys.spawn(scheduler, settings,
                    std::static_pointer_cast<schedule_store>(store),
                    std::move(watched));
    sched.run();
  }

  // An actor that only waits, standing in for the worker's root.
  caf::actor spawn_watched() {
    return sys.spawn([]() -> caf::behavior { return {[](int) {}}; });
  }

  // The scheduler ended: it gave the store back.
  bool scheduler_ended() const {
    return store.use_count() == 1;
  }

  scheduler_state& st() {
    return deref<scheduler_actor::stateful_base<scheduler_state>>(aut).state;
  }

  fake_domain& a() {
    return store->domains["a"];
  }
  fake_domain& b() {
    return store->domains["b"];
  }

  // Moves the clock by `d` and runs what became due.
  void advance(std::chrono::milliseconds d) {
    sched.advance_time(d);
    sched.run();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(scheduler_tests, fixture)

CAF_TEST(it fires at start and sleeps until the earliest next slot) {
  a().results.push_back(fired(1, 1));
  a().until = 300ms;
  b().until = 700ms;
  start();
  CAF_CHECK_EQUAL(a().fires, 1);
  CAF_CHECK_EQUAL(b().fires, 1);
  CAF_CHECK_EQUAL(st().armed.count(), 300);
  CAF_CHECK_EQUAL(metrics_a->schedule_fired.load(), 1);
  CAF_CHECK_EQUAL(metrics_a->schedule_last_lateness_us.load(), 3000);
  // Nothing before the slot.
  advance(299ms);
  CAF_CHECK_EQUAL(a().fires, 1);
  advance(1ms);
  CAF_CHECK_EQUAL(a().fires, 2);
  CAF_CHECK_EQUAL(b().fires, 2);
  CAF_CHECK_EQUAL(st().rounds, 2);
}

CAF_TEST(without a next slot it looks again after max_sleep) {
  start();
  CAF_CHECK_EQUAL(st().armed, settings.max_sleep);
  advance(settings.max_sleep - 1ms);
  CAF_CHECK_EQUAL(a().fires, 1);
  advance(1ms);
  CAF_CHECK_EQUAL(a().fires, 2);
  // A slot further away than max_sleep: max_sleep too.
  a().until = 5s;
  advance(settings.max_sleep);
  CAF_CHECK_EQUAL(st().armed, settings.max_sleep);
}

CAF_TEST(a full batch is followed by another at once) {
  a().results.push_back(fired(10, 10));
  a().results.push_back(fired(10, 10));
  a().results.push_back(fired(4, 4));
  start();
  CAF_CHECK_EQUAL(a().fires, 3);
  CAF_CHECK_EQUAL(metrics_a->schedule_fired.load(), 24);
  CAF_CHECK_EQUAL(metrics_a->schedule_lateness_us.load(), 24 * 3000);
}

CAF_TEST(a due schedule held elsewhere is looked at again shortly) {
  a().until = -5ms;
  start();
  CAF_CHECK_EQUAL(st().armed, settings.busy_sleep);
  advance(settings.busy_sleep);
  CAF_CHECK_EQUAL(a().fires, 2);
}

CAF_TEST(a failing domain waits for its backoff while the others go on) {
  a().fail_next = 1;
  b().until = 100ms;
  start();
  CAF_CHECK_EQUAL(a().failures, 1);
  CAF_CHECK_EQUAL(metrics_a->other_db_errors.load(), 1);
  CAF_CHECK_EQUAL(b().successes, 1);
  CAF_CHECK_EQUAL(st().armed.count(), 100);
  // b's slot: b fires, a is still backing off (200 ms from the start).
  advance(100ms);
  CAF_CHECK_EQUAL(b().fires, 2);
  CAF_CHECK_EQUAL(a().fires, 1);
  CAF_CHECK_EQUAL(st().armed.count(), 100);
  // Its backoff over, a is tried again and succeeds.
  advance(100ms);
  CAF_CHECK_EQUAL(a().fires, 2);
  CAF_CHECK_EQUAL(a().successes, 1);
  CAF_CHECK(st().retry_at.empty());
}

CAF_TEST(wakeups of older timers are ignored) {
  a().until = 500ms;
  start();
  auto rounds = st().rounds;
  auto current = st().timer;
  self->send(aut, atom::wakeup::value, current - 1);
  sched.run();
  CAF_CHECK_EQUAL(st().rounds, rounds);
  self->send(aut, atom::wakeup::value, current);
  sched.run();
  CAF_CHECK_EQUAL(st().rounds, rounds + 1);
}

CAF_TEST(it ends with the actor it watches) {
  a().until = 500ms;
  auto root = spawn_watched();
  start(root.address());
  CAF_CHECK_EQUAL(a().fires, 1);
  CAF_CHECK(!scheduler_ended());
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  sched.run();
  CAF_CHECK(scheduler_ended());
}

CAF_TEST(it ends at once when the actor it watches is already gone) {
  // A worker stopped while its detached scheduler was still starting: the
  // root ended and was destroyed, only its address is left.
  auto root = spawn_watched();
  auto addr = root.address();
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  sched.run();
  root = nullptr;
  CAF_REQUIRE(!caf::actor_cast<caf::actor>(addr));
  start(addr);
  CAF_CHECK_EQUAL(a().fires, 0);
  CAF_CHECK(scheduler_ended());
}

CAF_TEST_FIXTURE_SCOPE_END()
