// Deterministic tests of a handler node's actors (CAF test coordinator,
// no network): the door refuses another protocol version and a domain it
// does not serve and otherwise answers the offer and a session; a session
// passes its worker's deliveries to its domain's pool with the worker's
// lease and ends when that lease goes down; a pool runs at most its
// handlers' number of deliveries at once, queues the rest in order, and a
// drain refuses new deliveries and answers once nothing is queued or
// running. The handlers are scheduled fakes the tests finish one by one.

#define CAF_SUITE actors.node
#include "cmdbus/actors/node/door.hpp"
#include "cmdbus/actors/node/pool.hpp"
#include "cmdbus/actors/node/session.hpp"

#include "cmdbus/actors/errors.hpp"

#include <caf/test/dsl.hpp>

using namespace cmdbus;
using namespace cmdbus::actors;

namespace {

/// A fake node handler: keeps each delivery's promise until told (done)
/// to answer it with a success.
using fake_handler_actor = node_handler_actor::extend<caf::reacts_to<atom::done>>;

/// What the fake handlers were given, and which of them hold an open
/// delivery, in order.
struct handler_log {
  std::vector<remote::wire_command> got;
  std::vector<fake_handler_actor> busy;

  /// Has the handler of the oldest open delivery answer it.
  void finish_one() {
    auto h = busy.front();
    busy.erase(busy.begin());
    caf::anon_send(h, atom::done::value);
  }
};

struct fake_handler_state {
  caf::typed_response_promise<remote::wire_outcome> open;
};

fake_handler_actor::behavior_type
fake_handler(fake_handler_actor::stateful_pointer<fake_handler_state> self,
             std::shared_ptr<handler_log> log) {
  return {
    [self, log](atom::handle, remote::wire_command& cmd,
                const remote::lease_actor&)
      -> caf::result<remote::wire_outcome> {
      log->got.push_back(std::move(cmd));
      log->busy.push_back(fake_handler_actor{self});
      self->state.open = self->make_response_promise<remote::wire_outcome>();
      return self->state.open;
    },
    [self](atom::done) {
      self->state.open.deliver(remote::to_wire(outcome{}));
    },
  };
}

remote::lease_actor::behavior_type fake_lease(remote::lease_actor::pointer) {
  return {
    [](atom::extend, const std::vector<int64_t>& ids, int, bool) {
      return static_cast<int>(ids.size());
    },
  };
}

remote::wire_command delivery(int64_t msg_id) {
  remote::wire_command wc;
  wc.domain = "d";
  wc.command_type = "T";
  wc.command_id = uuid::random().to_string();
  wc.data = "{}";
  wc.msg_id = msg_id;
  wc.attempt = 1;
  wc.max_attempts = 3;
  return wc;
}

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<handler_log> log = std::make_shared<handler_log>();
  node_settings settings;
  node_pool_actor pool;
  remote::lease_actor lease;

  fixture() {
    auto registry = std::make_shared<handler_registry>();
    auto noop = [](const command&, handler_context&) { return json{}; };
    registry->add("d", "T", noop);
    registry->add("d", "A", noop);
    settings.registry = registry;
    settings.cancelled = std::make_shared<std::atomic<bool>>(false);
    settings.counters = std::make_shared<node_counters>();
    settings.name = std::make_shared<node_name>();
    settings.name->set("n1");
    settings.concurrency = 2;
    settings.heartbeat_ms = 250;
    auto l = log;
    pool = sys.spawn(node_pool, settings, std::string{"d"},
                     node_handler_spawner{
                       [l](node_pool_actor::pointer self,
                           const node_settings&, const std::string&) {
                         return caf::actor_cast<node_handler_actor>(
                           self->spawn<caf::linked>(fake_handler, l));
                       }});
    lease = sys.spawn(fake_lease);
    sched.run();
  }

  ~fixture() {
    caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(lease, caf::exit_reason::user_shutdown);
    sched.run();
  }

  node_pool_state& pool_state() {
    return deref<node_pool_actor::stateful_base<node_pool_state>>(pool).state;
  }

  /// Sends `n` deliveries to the pool (from `self`) and runs them in.
  void send(int n, int64_t first_msg_id = 1) {
    for (int i = 0; i < n; ++i)
      self->send(pool, atom::handle::value, delivery(first_msg_id + i), lease);
    sched.run();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(node_tests, fixture)

CAF_TEST(a pool runs its handlers number of deliveries and queues the rest) {
  send(3);
  CAF_CHECK_EQUAL(log->got.size(), 2u);
  CAF_CHECK_EQUAL(pool_state().queue.size(), 1u);
  CAF_CHECK_EQUAL(settings.counters->busy.load(), 2);
  CAF_CHECK_EQUAL(settings.counters->queued.load(), 1);
  log->finish_one();
  sched.run();
  // The freed handler takes the queued delivery, the oldest first.
  CAF_REQUIRE_EQUAL(log->got.size(), 3u);
  CAF_CHECK_EQUAL(log->got[2].msg_id, 3);
  CAF_CHECK_EQUAL(settings.counters->queued.load(), 0);
  CAF_CHECK_EQUAL(settings.counters->completed.load(), 1);
  // The answer reached the sender.
  self->receive([](const remote::wire_outcome& out) {
    CAF_CHECK_EQUAL(out.kind, static_cast<int32_t>(outcome_kind::success));
  });
}

CAF_TEST(a drain waits for queued and running deliveries and refuses new ones) {
  send(3);
  auto answered = std::make_shared<bool>(false);
  // The pool and the flag are spawn arguments, not captures: CAF 0.17.6
  // dereferences a null argument tuple when a function actor takes none.
  sys.spawn(
    [](caf::event_based_actor* a, node_pool_actor p,
       std::shared_ptr<bool> answered) {
      a->request(p, caf::infinite, atom::drain::value)
        .then([answered](atom::done) { *answered = true; });
    },
    pool, answered);
  sched.run();
  CAF_CHECK(!*answered);
  send(1, 10);
  // Refused while draining: nothing new reaches a handler.
  CAF_CHECK_EQUAL(log->got.size(), 2u);
  self->receive(
    [](const remote::wire_outcome&) { CAF_FAIL("a refused delivery ran"); },
    [](const caf::error& err) {
      CAF_CHECK_EQUAL(err.code(), static_cast<uint8_t>(ec::remote_unavailable));
    });
  log->finish_one();
  sched.run();
  log->finish_one();
  sched.run();
  CAF_CHECK(!*answered); // the queued one still runs
  log->finish_one();
  sched.run();
  CAF_CHECK(*answered);
}

CAF_TEST(a session passes deliveries on with its lease and ends with it) {
  auto s = sys.spawn(session, settings, pool, lease, std::string{"w1"},
                     std::string{"d"});
  sched.run();
  CAF_CHECK_EQUAL(settings.counters->sessions.load(), 1);
  self->send(s, atom::handle::value, delivery(7));
  sched.run();
  CAF_REQUIRE_EQUAL(log->got.size(), 1u);
  CAF_CHECK_EQUAL(log->got[0].msg_id, 7);
  caf::anon_send_exit(lease, caf::exit_reason::user_shutdown);
  sched.run();
  // The worker is gone: its session ended and no longer counts.
  CAF_CHECK_EQUAL(settings.counters->sessions.load(), 0);
}

CAF_TEST(the door refuses another protocol and an unknown domain) {
  auto d = sys.spawn(door, settings,
                     std::map<std::string, node_pool_actor>{{"d", pool}});
  sched.run();
  auto l = caf::actor_cast<caf::actor>(lease);
  auto other = remote::effective_protocol_version() + 1;
  self->send(d, atom::hello::value, other, std::string{"w"},
             std::string{"d"}, l);
  sched.run();
  self->receive(
    [](const remote::pool_offer&, const caf::actor&) {
      CAF_FAIL("another protocol version was accepted");
    },
    [](const caf::error& err) {
      CAF_CHECK_EQUAL(err.code(), static_cast<uint8_t>(ec::protocol_mismatch));
    });
  self->send(d, atom::hello::value, remote::effective_protocol_version(),
             std::string{"w"}, std::string{"elsewhere"}, l);
  sched.run();
  self->receive(
    [](const remote::pool_offer&, const caf::actor&) {
      CAF_FAIL("an unknown domain was accepted");
    },
    [](const caf::error& err) {
      CAF_CHECK_EQUAL(err.code(), static_cast<uint8_t>(ec::unknown_domain));
    });
  caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
  sched.run();
}

CAF_TEST(the door answers an offer and a session for its domain) {
  auto d = sys.spawn(door, settings,
                     std::map<std::string, node_pool_actor>{{"d", pool}});
  sched.run();
  self->send(d, atom::hello::value, remote::effective_protocol_version(),
             std::string{"w"}, std::string{"d"},
             caf::actor_cast<caf::actor>(lease));
  sched.run();
  caf::actor session_hdl;
  self->receive(
    [&](const remote::pool_offer& offer, const caf::actor& s) {
      CAF_CHECK_EQUAL(offer.node_name, "n1");
      CAF_CHECK_EQUAL(offer.slots, 2);
      CAF_CHECK_EQUAL(offer.heartbeat_ms, 250);
      CAF_CHECK_EQUAL(offer.command_types,
                      (std::vector<std::string>{"A", "T"}));
      session_hdl = s;
    },
    [](const caf::error& err) { CAF_FAIL("refused: " << describe(err)); });
  CAF_REQUIRE(session_hdl != nullptr);
  CAF_CHECK_EQUAL(settings.counters->sessions.load(), 1);
  // The session is a handler pool for the worker.
  auto s = caf::actor_cast<remote::handler_pool_actor>(session_hdl);
  self->send(s, atom::handle::value, delivery(5));
  sched.run();
  CAF_REQUIRE_EQUAL(log->got.size(), 1u);
  caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
  sched.run();
}

CAF_TEST_FIXTURE_SCOPE_END()
