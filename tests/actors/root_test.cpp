// The worker's root supervisor on the deterministic coordinator: a domain
// whose supervisor dies is restarted with backoff while the other domains
// keep running, and so is a process reply router; a dead batch counter is
// replaced, drain waits for every domain and router and then for the batch
// counter, and the root's end ends every domain (links).

#define CAF_SUITE actors.root
#include "cmdbus/actors/worker/root.hpp"

#include <caf/test/dsl.hpp>

using namespace cmdbus;
using namespace cmdbus::actors;
using namespace std::chrono_literals;

namespace {

// A domain supervisor that only drains (untyped: the root uses one message
// of its interface; the test casts its handle).
caf::behavior fake_domain(caf::event_based_actor*) {
  return {
    [](atom::drain) { return atom::done::value; },
  };
}

// A batch counter that records the batches it got.
batch_counter_actor::behavior_type
fake_counter(batch_counter_actor::pointer,
             std::shared_ptr<std::vector<uuid>> got) {
  return {
    [got](atom::batches, const std::string&, const std::vector<uuid>& ids) {
      got->insert(got->end(), ids.begin(), ids.end());
    },
    [](atom::drain) { return atom::done::value; },
    [](atom::sweep) {},
  };
}

// A domain's end, as a crashed supervisor's link reports it.
constexpr auto crashed = caf::exit_reason::unhandled_exception;

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<std::vector<std::pair<std::string, supervisor_actor>>> spawned
    = std::make_shared<std::vector<std::pair<std::string, supervisor_actor>>>();
  std::shared_ptr<std::vector<batch_counter_actor>> counters_spawned
    = std::make_shared<std::vector<batch_counter_actor>>();
  std::shared_ptr<std::vector<uuid>> delivered
    = std::make_shared<std::vector<uuid>>();
  std::shared_ptr<std::vector<process_router_actor>> routers
    = std::make_shared<std::vector<process_router_actor>>();
  root_actor aut;

  fixture() {
    std::vector<domain_settings> domains(2);
    domains[0].domain = "a";
    domains[1].domain = "b";
    for (auto& d : domains)
      d.metrics = std::make_shared<domain_metrics>(d.domain, 4,
                                                   std::vector<std::string>{});
    auto log = spawned;
    auto clog = counters_spawned;
    auto got = delivered;
    aut = sys.spawn(
      root, domains,
      [log](root_actor::pointer self, const domain_settings& s) {
        auto a = caf::actor_cast<supervisor_actor>(
          self->spawn<caf::linked>(fake_domain));
        log->emplace_back(s.domain, a);
        return a;
      },
      [clog, got](root_actor::pointer self) {
        auto c = self->spawn<caf::linked>(fake_counter, got);
        clog->push_back(c);
        return c;
      },
      std::vector<process_settings>{process_settings{}},
      [rlog = routers](root_actor::pointer self, const process_settings&) {
        // A router that only drains, like the fake domains.
        auto r = caf::actor_cast<process_router_actor>(
          self->spawn<caf::linked>(fake_domain));
        rlog->push_back(r);
        return r;
      });
    sched.run();
  }

  ~fixture() {
    caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
  }

  root_state& st() {
    return deref<root_actor::stateful_base<root_state>>(aut).state;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(root_tests, fixture)

CAF_TEST(a crashed process router restarts with backoff) {
  CAF_REQUIRE_EQUAL(routers->size(), 1u);
  caf::anon_send_exit(routers->front(), crashed);
  sched.run();
  CAF_CHECK(st().routers[0] == nullptr);
  // The domains are not touched.
  CAF_CHECK_EQUAL(spawned->size(), 2u);
  sched.advance_time(999ms);
  sched.run();
  CAF_CHECK_EQUAL(routers->size(), 1u);
  sched.advance_time(1ms);
  sched.run();
  CAF_REQUIRE_EQUAL(routers->size(), 2u);
  CAF_CHECK(st().routers[0] == routers->back());
  // Not restarted once the worker stops.
  self->send(aut, atom::drain::value);
  sched.run();
  self->receive([](atom::done) {});
  caf::anon_send_exit(routers->back(), crashed);
  sched.run();
  sched.advance_time(10s);
  sched.run();
  CAF_CHECK_EQUAL(routers->size(), 2u);
}

CAF_TEST(a crashed domain restarts with backoff and the others keep running) {
  CAF_REQUIRE_EQUAL(spawned->size(), 2u);
  auto a = (*spawned)[0].second;
  auto b = (*spawned)[1].second;
  // Domain a held 3 messages when it died: they are in flight no more;
  // domain b's 2 stay.
  st().domains[0].metrics->in_flight = 3;
  st().domains[1].metrics->in_flight = 2;
  caf::anon_send_exit(a, crashed);
  sched.run();
  CAF_CHECK(st().supervisors[0] == nullptr);
  CAF_CHECK(st().supervisors[1] == b);
  CAF_CHECK_EQUAL(st().domains[0].metrics->in_flight.load(), 0);
  CAF_CHECK_EQUAL(st().domains[1].metrics->in_flight.load(), 2);
  CAF_CHECK_EQUAL(spawned->size(), 2u);
  // Nothing before the 1 s backoff ...
  sched.advance_time(999ms);
  sched.run();
  CAF_CHECK_EQUAL(spawned->size(), 2u);
  // ... then a new supervisor for domain a.
  sched.advance_time(1ms);
  sched.run();
  CAF_REQUIRE_EQUAL(spawned->size(), 3u);
  CAF_CHECK_EQUAL((*spawned)[2].first, "a");
  CAF_CHECK(st().supervisors[0] == (*spawned)[2].second);
  // A second crash right away doubles the delay.
  caf::anon_send_exit((*spawned)[2].second, crashed);
  sched.run();
  sched.advance_time(1s);
  sched.run();
  CAF_CHECK_EQUAL(spawned->size(), 3u);
  sched.advance_time(1s);
  sched.run();
  CAF_CHECK_EQUAL(spawned->size(), 4u);
}

CAF_TEST(drain answers after every domain drained) {
  self->send(aut, atom::drain::value);
  sched.run();
  CAF_REQUIRE_EQUAL(self->mailbox().size(), 1u);
  self->receive([](atom::done) {});
  // No restarts once stopping.
  caf::anon_send_exit((*spawned)[0].second, crashed);
  sched.run();
  sched.advance_time(10s);
  sched.run();
  CAF_CHECK_EQUAL(spawned->size(), 2u);
}

CAF_TEST(drain answers at once while every domain is restarting) {
  for (auto& [name, sup] : *spawned)
    caf::anon_send_exit(sup, crashed);
  sched.run();
  CAF_CHECK(st().supervisors[0] == nullptr);
  CAF_CHECK(st().supervisors[1] == nullptr);
  self->send(aut, atom::drain::value);
  sched.run();
  CAF_REQUIRE_EQUAL(self->mailbox().size(), 1u);
  self->receive([](atom::done) {});
}

CAF_TEST(completed batches reach the batch counter and a dead one is replaced) {
  CAF_REQUIRE_EQUAL(counters_spawned->size(), 1u);
  auto first = uuid::random();
  self->send(aut, atom::batches::value, std::string{"a"},
             std::vector<uuid>{first});
  sched.run();
  CAF_REQUIRE_EQUAL(delivered->size(), 1u);
  CAF_CHECK_EQUAL((*delivered)[0], first);
  caf::anon_send_exit(counters_spawned->front(), crashed);
  sched.run();
  CAF_REQUIRE_EQUAL(counters_spawned->size(), 2u);
  CAF_CHECK(st().counter == counters_spawned->back());
  self->send(aut, atom::batches::value, std::string{"a"},
             std::vector<uuid>{uuid::random()});
  sched.run();
  CAF_CHECK_EQUAL(delivered->size(), 2u);
  // The domains kept running.
  CAF_CHECK(st().supervisors[0] == (*spawned)[0].second);
  CAF_CHECK(st().supervisors[1] == (*spawned)[1].second);
}

CAF_TEST(drain waits for the batch counter after the domains and routers) {
  self->send(aut, atom::drain::value);
  expect((atom::drain), from(self).to(aut).with(_));
  expect((atom::drain), from(aut).to((*spawned)[0].second).with(_));
  expect((atom::drain), from(aut).to((*spawned)[1].second).with(_));
  expect((atom::drain), from(aut).to(routers->front()).with(_));
  expect((atom::done), from((*spawned)[0].second).to(aut).with(_));
  expect((atom::done), from((*spawned)[1].second).to(aut).with(_));
  expect((atom::done), from(routers->front()).to(aut).with(_));
  expect((atom::drain), from(aut).to(counters_spawned->front()).with(_));
  expect((atom::done), from(counters_spawned->front()).to(aut).with(_));
  expect((atom::done), from(aut).to(self).with(_));
}

CAF_TEST(ending the root ends every domain and router and the batch counter) {
  for (auto& [name, sup] : *spawned)
    self->monitor(sup);
  self->monitor(routers->front());
  self->monitor(counters_spawned->front());
  caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
  sched.run();
  size_t ended = 0;
  while (!self->mailbox().empty())
    self->receive([&](caf::down_msg& dm) {
      CAF_CHECK_EQUAL(dm.reason, caf::exit_reason::user_shutdown);
      ++ended;
    });
  CAF_CHECK_EQUAL(ended, 4u);
}

CAF_TEST(restart delays double up to a minute) {
  CAF_CHECK_EQUAL(restart_delay(1).count(), 1000);
  CAF_CHECK_EQUAL(restart_delay(2).count(), 2000);
  CAF_CHECK_EQUAL(restart_delay(7).count(), 60000);
  CAF_CHECK_EQUAL(restart_delay(50).count(), 60000);
}

CAF_TEST_FIXTURE_SCOPE_END()
