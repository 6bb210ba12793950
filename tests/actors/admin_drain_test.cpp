// The admin drain (cmdbus cluster drain) on the deterministic coordinator:
// a request to the root that reports the worker idle once every domain
// finished what it held, not before (a drain slower than its bound keeps
// waiting); a domain that ends while draining holds nothing and is not
// restarted; a stop during the drain ends it without reporting idle, and a
// stop after it (or while it waits) drains again and gets its answer.

#define CAF_SUITE actors.admin_drain
#include "cmdbus/actors/worker/admin_drain.hpp"
#include "cmdbus/actors/worker/root.hpp"

#include <caf/test/dsl.hpp>

using namespace cmdbus;
using namespace cmdbus::actors;
using namespace std::chrono_literals;

namespace {

// A domain supervisor that holds work until the test says it is done
// (atom::flush): drains asked before are answered then, later ones at once.
struct holding_state {
  std::vector<caf::typed_response_promise<atom::done>> waiting;
  bool idle = false;
};

caf::behavior holding_domain(caf::stateful_actor<holding_state>* self) {
  return {
    [self](atom::drain) -> caf::result<atom::done> {
      if (self->state.idle)
        return atom::done::value;
      auto rp = self->make_response_promise<atom::done>();
      self->state.waiting.push_back(rp);
      return rp;
    },
    [self](atom::flush) {
      self->state.idle = true;
      for (auto& rp : self->state.waiting)
        rp.deliver(atom::done::value);
      self->state.waiting.clear();
    },
  };
}

batch_counter_actor::behavior_type fake_counter(batch_counter_actor::pointer) {
  return {
    [](atom::batches, const std::string&, const std::vector<uuid>&) {},
    [](atom::drain) { return atom::done::value; },
    [](atom::sweep) {},
  };
}

constexpr auto crashed = caf::exit_reason::unhandled_exception;

// How long the drain may take before it warns (the shutdown timeout).
constexpr auto bound = std::chrono::milliseconds{10000};

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<std::vector<caf::actor>> spawned
    = std::make_shared<std::vector<caf::actor>>();
  root_actor aut;
  /// How often the admin drain reported the worker idle.
  std::shared_ptr<int> idle = std::make_shared<int>(0);

  fixture() {
    std::vector<domain_settings> domains(2);
    domains[0].domain = "a";
    domains[1].domain = "b";
    for (auto& d : domains)
      d.metrics = std::make_shared<domain_metrics>(d.domain, 4,
                                                   std::vector<std::string>{});
    auto log = spawned;
    aut = sys.spawn(
      root, domains,
      [log](root_actor::pointer self, const domain_settings&) {
        auto a = self->spawn<caf::linked>(holding_domain);
        log->push_back(a);
        return caf::actor_cast<supervisor_actor>(a);
      },
      [](root_actor::pointer self) {
        return self->spawn<caf::linked>(fake_counter);
      },
      std::vector<process_settings>{}, router_spawner{});
    sched.run();
  }

  ~fixture() {
    caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
    sched.run();
  }

  // Starts an admin drain, monitored by the test.
  admin_drain_actor start_drain() {
    auto n = idle;
    auto d = sys.spawn(admin_drain, aut, bound, [n] { ++*n; });
    self->monitor(d);
    sched.run();
    return d;
  }

  // The domain `i` finished what it held.
  void finish(size_t i) {
    caf::anon_send(spawned->at(i), atom::flush::value);
    sched.run();
  }

  // Whether the admin drain ended (its down message arrived).
  bool drain_ended() {
    bool ended = false;
    while (!self->mailbox().empty())
      self->receive([&](caf::down_msg&) { ended = true; }, [](atom::done) {});
    return ended;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(admin_drain_tests, fixture)

CAF_TEST(the worker is idle once every domain finished what it held) {
  start_drain();
  CAF_CHECK_EQUAL(*idle, 0);
  finish(0);
  CAF_CHECK_EQUAL(*idle, 0);
  CAF_CHECK(!drain_ended());
  finish(1);
  CAF_CHECK_EQUAL(*idle, 1);
  CAF_CHECK(drain_ended());
}

CAF_TEST(a drain slower than its bound keeps waiting) {
  start_drain();
  sched.advance_time(bound + 1ms);
  sched.run();
  CAF_CHECK_EQUAL(*idle, 0);
  CAF_CHECK(!drain_ended());
  finish(0);
  finish(1);
  CAF_CHECK_EQUAL(*idle, 1);
  CAF_CHECK(drain_ended());
}

CAF_TEST(a domain that ends while draining holds nothing and stays down) {
  start_drain();
  finish(0);
  caf::anon_send_exit(spawned->at(1), crashed);
  sched.run();
  CAF_CHECK_EQUAL(*idle, 1);
  CAF_CHECK(drain_ended());
  // Intake stopped for good: no restart after the backoff.
  sched.advance_time(10s);
  sched.run();
  CAF_CHECK_EQUAL(spawned->size(), 2u);
}

CAF_TEST(a stop during the drain ends it without reporting idle) {
  start_drain();
  caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
  sched.run();
  CAF_CHECK_EQUAL(*idle, 0);
  CAF_CHECK(drain_ended());
}

CAF_TEST(a stop while the drain waits drains too and both get answers) {
  start_drain();
  self->send(aut, atom::drain::value);
  sched.run();
  CAF_CHECK(self->mailbox().empty());
  finish(0);
  finish(1);
  CAF_CHECK_EQUAL(*idle, 1);
  bool done = false;
  bool ended = false;
  while (!self->mailbox().empty())
    self->receive([&](atom::done) { done = true; },
                  [&](caf::down_msg&) { ended = true; });
  CAF_CHECK(done);
  CAF_CHECK(ended);
}

CAF_TEST(a stop after the drain drains again at once) {
  start_drain();
  finish(0);
  finish(1);
  CAF_REQUIRE_EQUAL(*idle, 1);
  CAF_CHECK(drain_ended());
  self->send(aut, atom::drain::value);
  sched.run();
  CAF_REQUIRE_EQUAL(self->mailbox().size(), 1u);
  self->receive([](atom::done) {});
}

CAF_TEST_FIXTURE_SCOPE_END()
