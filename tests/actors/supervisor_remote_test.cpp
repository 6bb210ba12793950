// Deterministic tests of the supervisor's remote handler pools (CAF test
// coordinator): a pool's slots join the credits, commands route by type,
// a pool never runs more than its slots, a pool that dies gives its
// commands back to the queue at once and its credits back to nobody (a
// debt freed slots pay), a pool that returns restores them, and the lease
// heartbeat and the drain include remote commands. The remote links are
// inert fakes: the tests send pool_up / pool_down themselves, and the
// pools are scheduled fakes that the tests step.

#define CAF_SUITE actors.supervisor_remote
#include "cmdbus/actors/worker/supervisor.hpp"

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/remote_protocol.hpp"

#include "tests/actors/settings.hpp"
#include "tests/actors/sinks.hpp"

#include <caf/test/dsl.hpp>

using namespace cmdbus;
using namespace cmdbus::actors;

namespace {

struct children {
  poller_actor poller;
  completion_actor completion;
  retry_scheduler_actor retry;
  std::vector<handler_actor> handlers;
  std::vector<remote_link_actor> links;
  std::vector<std::string> link_addresses;
  /// (msg_ids, seconds) of every extension the retry scheduler got.
  std::vector<std::pair<std::vector<int64_t>, int>> extends;
};

handler_actor::behavior_type local_handler(handler_actor::pointer) {
  return {
    [](atom::handle, const command_ptr&) { return outcome{}; },
  };
}

// A remote pool whose every command succeeds.
remote::handler_pool_actor::behavior_type fake_pool(remote::handler_pool_actor::pointer) {
  return {
    [](atom::handle, const remote::wire_command&) {
      return remote::to_wire(outcome{}, std::chrono::nanoseconds{0});
    },
  };
}

// A remote pool that takes commands and answers none of them until it gets
// (atom::done): a node that has not finished yet. Dynamically typed so that
// the test can release it; the supervisor sees a handler_pool_actor.
using promises = std::vector<caf::typed_response_promise<remote::wire_outcome>>;

caf::behavior silent_pool(caf::event_based_actor* self,
                          std::shared_ptr<promises> kept) {
  return {
    [self, kept](atom::handle, const remote::wire_command&)
      -> caf::result<remote::wire_outcome> {
      auto rp = self->make_response_promise<remote::wire_outcome>();
      kept->push_back(rp);
      return rp;
    },
    [kept](atom::done) {
      for (auto& rp : *kept)
        rp.deliver(remote::to_wire(outcome{}));
      kept->clear();
    },
  };
}

remote_link_actor::behavior_type inert_link(remote_link_actor::pointer) {
  return {
    [](atom::connect) {},
  };
}

retry_scheduler_actor::behavior_type
retry_sink(retry_scheduler_actor::pointer, std::shared_ptr<children> k) {
  return {
    [](atom::retry, const db::retry_command&) {},
    [](atom::flush) {},
    [k](atom::extend, const std::vector<int64_t>& ids, int seconds, bool) {
      k->extends.emplace_back(ids, seconds);
      return static_cast<int>(ids.size());
    },
    [](atom::claim, const std::vector<received_command>&) {
      return std::vector<int64_t>{};
    },
  };
}

batch_listener_actor::behavior_type parent_sink(batch_listener_actor::pointer) {
  return {
    [](atom::batches, const std::string&, const std::vector<uuid>&) {},
  };
}

received_command make_rc(int64_t msg_id, const std::string& type) {
  received_command rc;
  rc.cmd.domain = "d";
  rc.cmd.command_type = type;
  rc.cmd.command_id = uuid::random();
  rc.msg_id = msg_id;
  rc.attempt = 1;
  rc.max_attempts = 5;
  return rc;
}

remote::pool_offer offer_of(int32_t slots, std::vector<std::string> types) {
  remote::pool_offer o;
  o.node_name = "n";
  o.command_types = std::move(types);
  o.slots = slots;
  o.heartbeat_ms = 100;
  return o;
}

// The supervisor's children as fakes that `k` records.
spawners fake_spawners(std::shared_ptr<children> k) {
  spawners sp;
  sp.poller = [k](supervisor_actor::pointer self, const domain_settings&) {
    k->poller = self->spawn<caf::linked>(test::poller_sink);
    return k->poller;
  };
  sp.completion = [k](supervisor_actor::pointer self, const domain_settings&) {
    k->completion = self->spawn<caf::linked>(test::completion_sink);
    return k->completion;
  };
  sp.retry = [k](supervisor_actor::pointer self, const domain_settings&) {
    k->retry = self->spawn<caf::linked>(retry_sink, k);
    return k->retry;
  };
  sp.handler = [k](supervisor_actor::pointer self, const domain_settings&,
                   handler_mode) {
    auto h = self->spawn<caf::linked>(local_handler);
    k->handlers.push_back(h);
    return h;
  };
  sp.remote = [k](supervisor_actor::pointer self, const domain_settings&,
                  const std::string& address) {
    auto l = self->spawn<caf::linked>(inert_link);
    k->links.push_back(l);
    k->link_addresses.push_back(address);
    return l;
  };
  return sp;
}

// Domain "d": local handlers for "ok" (concurrency 2, prefetch 0), and two
// configured remote pools, "n1:1" and "n2:2".
struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<children> kids = std::make_shared<children>();
  domain_settings settings;
  batch_listener_actor parent;
  supervisor_actor sup;

  fixture() {
    config::worker_config cfg;
    cfg.concurrency = 2;
    cfg.prefetch = 0;
    cfg.visibility_timeout = std::chrono::seconds{30};
    cfg.remote.pools = {"n1:1", "n2:2"};
    auto reg = std::make_shared<handler_registry>();
    reg->add("d", "ok", [](const command&, handler_context&) { return json{}; });
    settings = test::make_settings(cfg, "d", std::move(reg));
    auto sp = fake_spawners(kids);
    parent = sys.spawn(parent_sink);
    sup = sys.spawn(supervisor, settings, sp, parent);
    sched.run();
  }

  ~fixture() {
    // Undelivered promises keep their pools alive: drop them first.
    kept->clear();
    for (auto& pool : pools)
      caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(parent, caf::exit_reason::user_shutdown);
  }

  std::vector<remote::handler_pool_actor> pools;

  supervisor_state& st() {
    return deref<supervisor_actor::stateful_base<supervisor_state>>(sup)
      .state;
  }

  std::shared_ptr<promises> kept = std::make_shared<promises>();

  // Connects a fake pool at `address` (sent as its link would); a silent
  // one never answers by itself.
  remote::handler_pool_actor connect(const std::string& address, int32_t slots,
                                     std::vector<std::string> types,
                                     bool silent = false) {
    auto pool = silent ? caf::actor_cast<remote::handler_pool_actor>(
                  sys.spawn(silent_pool, kept))
                       : sys.spawn(fake_pool);
    pools.push_back(pool);
    caf::send_as(kids->links.at(0), sup, atom::pool_up::value, address,
                 offer_of(slots, std::move(types)), pool);
    return pool;
  }

  void run(std::vector<received_command> batch) {
    self->send(sup, atom::run::value, std::move(batch));
    expect((atom::run, std::vector<received_command>),
           from(self).to(sup).with(_, _));
  }

  int64_t busy(const std::string& address) {
    for (auto& r : st().remotes)
      if (r.address == address)
        return r.busy;
    return -1;
  }

  int64_t running_on(const std::string& address) {
    int64_t n = 0;
    for (auto& [delivery, run] : st().running)
      if (run.remote == address)
        ++n;
    return n;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(supervisor_remote_tests, fixture)

CAF_TEST(a link per configured pool and local credits only at first) {
  CAF_CHECK_EQUAL(kids->link_addresses,
                  (std::vector<std::string>{"n1:1", "n2:2"}));
  CAF_CHECK_EQUAL(st().local_slots, 2);
  CAF_CHECK_EQUAL(st().capacity(), 2);
  CAF_CHECK_EQUAL(st().credits.granted(), 2);
  CAF_CHECK(st().credits_balanced());
}

CAF_TEST(a connected pool adds its slots to the credits and the hold limit) {
  connect("n1:1", 3, {"far"});
  sched.run();
  CAF_CHECK_EQUAL(st().remotes.size(), 1u);
  CAF_CHECK_EQUAL(st().capacity(), 5);
  CAF_CHECK_EQUAL(st().credits.granted(), 5);
  CAF_CHECK_EQUAL(hold_limit(st().capacity()), 20);
  CAF_CHECK_EQUAL(settings.metrics->remote_slots.load(), 3);
  CAF_CHECK(st().credits_balanced());
}

CAF_TEST(commands route by type and a pool never runs more than its slots) {
  auto pool = connect("n1:1", 2, {"far"});
  sched.run();
  CAF_REQUIRE_EQUAL(st().credits.granted(), 4);
  run({make_rc(1, "ok"), make_rc(2, "far"), make_rc(3, "far"),
       make_rc(4, "far")});
  // "ok" runs locally, two "far" remotely, the third waits for a slot.
  CAF_CHECK_EQUAL(running_on(""), 1);
  CAF_CHECK_EQUAL(running_on("n1:1"), 2);
  CAF_CHECK_EQUAL(busy("n1:1"), 2);
  CAF_CHECK_EQUAL(st().backlog.size(), 1u);
  CAF_CHECK(st().credits_balanced());
  // Step the whole system: the pool never holds more than its 2 slots.
  while (sched.try_run_once()) {
    CAF_CHECK_LESS_OR_EQUAL(busy("n1:1"), 2);
    CAF_CHECK(st().credits_balanced());
  }
  CAF_CHECK(st().backlog.empty());
  CAF_CHECK(st().running.empty());
  CAF_CHECK_EQUAL(busy("n1:1"), 0);
  CAF_CHECK_EQUAL(st().held(), 4); // handed to the completion writer
  CAF_CHECK_EQUAL(settings.metrics->in_flight.load(), 0);
  CAF_CHECK(pool != nullptr);
}

CAF_TEST(a dead pool releases its commands at once and takes its credits) {
  auto pool = connect("n1:1", 3, {"far"}, true);
  sched.run();
  CAF_REQUIRE_EQUAL(st().credits.granted(), 5);
  // Two run on the pool (its third slot idle), and the poller keeps the
  // three other credits.
  run({make_rc(11, "far"), make_rc(12, "far")});
  CAF_REQUIRE_EQUAL(running_on("n1:1"), 2);
  CAF_REQUIRE_EQUAL(settings.metrics->in_flight.load(), 2);
  // The node dies before answering: no reply ever comes, the down message
  // does the cleanup.
  caf::anon_send_exit(pool, caf::exit_reason::kill);
  sched.run();
  CAF_CHECK(st().remotes.empty());
  CAF_CHECK_EQUAL(running_on("n1:1"), 0);
  CAF_CHECK_EQUAL(settings.metrics->in_flight.load(), 0);
  // Made visible again now: (extend, [11, 12], 0 s).
  CAF_REQUIRE_EQUAL(kids->extends.size(), 1u);
  CAF_CHECK_EQUAL(kids->extends[0].first, (std::vector<int64_t>{11, 12}));
  CAF_CHECK_EQUAL(kids->extends[0].second, 0);
  // No credit comes back for the dropped commands or the idle slot: the
  // poller still holds 3 credits for a capacity of 2, a debt of 1.
  CAF_CHECK_EQUAL(st().capacity(), 2);
  CAF_CHECK_EQUAL(st().credits.granted(), 3);
  CAF_CHECK_EQUAL(st().credits.debt(), 1);
  CAF_CHECK(st().credits_balanced());
  CAF_CHECK_EQUAL(settings.metrics->remote_slots.load(), 0);
  CAF_CHECK_EQUAL(settings.metrics->remote_disconnects.load(), 1);
  // The link's pool_down for the same pool changes nothing (idempotent).
  caf::send_as(kids->links.at(0), sup, atom::pool_down::value,
               std::string{"n1:1"});
  sched.run();
  CAF_CHECK_EQUAL(kids->extends.size(), 1u);
  CAF_CHECK_EQUAL(st().credits.debt(), 1);
  // A local command read with the surplus credit: its freed slot pays the
  // debt instead of going back to the poller.
  run({make_rc(13, "ok")});
  sched.run();
  CAF_CHECK_EQUAL(st().credits.debt(), 0);
  CAF_CHECK_EQUAL(st().credits.granted() + st().credits.pending(), 2);
  CAF_CHECK(st().credits_balanced());
}

CAF_TEST(a pool that comes back restores its credits) {
  auto pool = connect("n1:1", 3, {"far"});
  sched.run();
  caf::send_as(kids->links.at(0), sup, atom::pool_down::value,
               std::string{"n1:1"});
  sched.run();
  // Idle slots are taken back from the pending credits first, else they
  // are a debt.
  CAF_CHECK_EQUAL(st().capacity(), 2);
  CAF_CHECK(st().credits_balanced());
  auto again = connect("n1:1", 3, {"far"});
  sched.run();
  CAF_CHECK_EQUAL(st().capacity(), 5);
  CAF_CHECK_EQUAL(st().credits.debt(), 0);
  CAF_CHECK_EQUAL(st().credits.granted(), 5);
  CAF_CHECK(st().credits_balanced());
  run({make_rc(21, "far")});
  CAF_CHECK_EQUAL(running_on("n1:1"), 1);
  CAF_CHECK(pool != again);
}

CAF_TEST(a pool replaced under the same address releases the old one) {
  connect("n1:1", 2, {"far"}, true);
  sched.run();
  run({make_rc(31, "far")});
  CAF_REQUIRE_EQUAL(running_on("n1:1"), 1);
  connect("n1:1", 2, {"far"});
  expect((atom::pool_up, std::string, remote::pool_offer,
          remote::handler_pool_actor),
         to(sup).with(_, _, _, _));
  CAF_CHECK_EQUAL(st().remotes.size(), 1u);
  CAF_REQUIRE_EQUAL(kids->extends.size(), 0u); // not run yet
  sched.run();
  CAF_REQUIRE_GREATER_OR_EQUAL(kids->extends.size(), 1u);
  CAF_CHECK_EQUAL(kids->extends[0].first, (std::vector<int64_t>{31}));
  CAF_CHECK(st().credits_balanced());
}

CAF_TEST(the lease heartbeat covers remote commands) {
  connect("n1:1", 2, {"far"}, true);
  sched.run();
  run({make_rc(41, "far"), make_rc(42, "ok")});
  test::retune(st().settings, [](config::worker_config& c) {
    c.visibility_timeout = std::chrono::seconds{0};
  });
  self->send(sup, atom::heartbeat::value);
  expect((atom::heartbeat), from(self).to(sup));
  expect((atom::extend, std::vector<int64_t>, int, bool),
         from(sup).to(kids->retry).with(_, _, 0, true));
  CAF_REQUIRE_EQUAL(kids->extends.size(), 1u);
  auto ids = kids->extends[0].first;
  std::sort(ids.begin(), ids.end());
  CAF_CHECK_EQUAL(ids, (std::vector<int64_t>{41, 42}));
}

CAF_TEST(a drain waits for a remote command to finish) {
  auto pool = connect("n1:1", 2, {"far"}, true);
  sched.run();
  run({make_rc(51, "far")});
  self->send(sup, atom::drain::value);
  expect((atom::drain), from(self).to(sup).with(_));
  CAF_CHECK(st().draining);
  CAF_CHECK_EQUAL(st().held(), 1);
  CAF_CHECK(self->mailbox().empty());
  // The pool answers: the command goes to the completion writer, and the
  // drain is answered once its side effects are committed.
  sched.run();
  CAF_CHECK_EQUAL(st().held(), 1);
  CAF_CHECK(self->mailbox().empty());
  CAF_REQUIRE_EQUAL(kept->size(), 1u);
  caf::anon_send(caf::actor_cast<caf::actor>(pool), atom::done::value);
  sched.run();
  CAF_CHECK(st().running.empty());
  CAF_CHECK_EQUAL(st().held(), 1);
  CAF_CHECK(self->mailbox().empty());
  caf::send_as(kids->completion, sup, atom::committed::value, int64_t{1});
  sched.run();
  CAF_CHECK_EQUAL(st().held(), 0);
  CAF_CHECK(!self->mailbox().empty());
}

CAF_TEST(a drain ends when the pool of a running command dies) {
  auto pool = connect("n1:1", 2, {"far"}, true);
  sched.run();
  run({make_rc(61, "far")});
  CAF_REQUIRE_EQUAL(running_on("n1:1"), 1);
  self->send(sup, atom::drain::value);
  expect((atom::drain), from(self).to(sup).with(_));
  // The pool has not answered: the drain waits ...
  CAF_CHECK_EQUAL(st().held(), 1);
  CAF_CHECK(self->mailbox().empty());
  // ... until the pool dies: the command goes back to the queue and the
  // drain is answered.
  caf::anon_send_exit(pool, caf::exit_reason::kill);
  sched.run();
  CAF_CHECK_EQUAL(st().held(), 0);
  CAF_CHECK(!self->mailbox().empty());
}

CAF_TEST(a type no connected pool serves waits then goes back to the queue) {
  connect("n1:1", 2, {"far"});
  sched.run();
  // "else" might be served by the pool at n2:2, which is not connected.
  run({make_rc(71, "else")});
  CAF_CHECK_EQUAL(st().backlog.size(), 1u);
  CAF_CHECK(st().running.empty());
  // After a visibility timeout of waiting it is given back (vt 0 here).
  test::retune(st().settings, [](config::worker_config& c) {
    c.visibility_timeout = std::chrono::seconds{0};
  });
  self->send(sup, atom::heartbeat::value);
  sched.run_once();
  sched.run();
  CAF_CHECK(st().backlog.empty());
  bool released = false;
  for (auto& [ids, secs] : kids->extends)
    if (ids == std::vector<int64_t>{71} && secs == 0)
      released = true;
  CAF_CHECK(released);
  CAF_CHECK_EQUAL(settings.metrics->in_flight.load(), 0);
  CAF_CHECK(st().credits_balanced());
}

CAF_TEST(a type no pool serves fails locally once every pool is connected) {
  connect("n1:1", 2, {"far"});
  connect("n2:2", 2, {"far"});
  sched.run();
  run({make_rc(81, "unknown")});
  // Runs on a local handler, where the registry fails it.
  CAF_CHECK_EQUAL(running_on(""), 1);
  CAF_CHECK(st().backlog.empty());
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

// Domain "d" without any local handler: everything runs remotely.
struct remote_only_fixture : test_coordinator_fixture<> {
  std::shared_ptr<children> kids = std::make_shared<children>();
  supervisor_actor sup;

  remote_only_fixture() {
    config::worker_config cfg;
    cfg.concurrency = 2;
    cfg.remote.pools = {"n1:1"};
    auto settings = test::make_settings(cfg, "d");
    auto sp = fake_spawners(kids);
    sup = sys.spawn(supervisor, settings, sp, batch_listener_actor{});
    sched.run();
  }

  ~remote_only_fixture() {
    caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  }

  supervisor_state& st() {
    return deref<supervisor_actor::stateful_base<supervisor_state>>(sup)
      .state;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(supervisor_remote_only_tests, remote_only_fixture)

CAF_TEST(a domain without local handlers has no local slots) {
  CAF_CHECK(kids->handlers.empty());
  CAF_CHECK_EQUAL(st().local_slots, 0);
  // The poller starts with its usual credits: they are a debt until a
  // pool connects.
  CAF_CHECK_EQUAL(st().credits.granted(), 2);
  CAF_CHECK_EQUAL(st().credits.debt(), 2);
  CAF_CHECK(st().credits_balanced());
  auto pool = sys.spawn(fake_pool);
  caf::send_as(kids->links.at(0), sup, atom::pool_up::value,
               std::string{"n1:1"}, offer_of(3, {"far"}), pool);
  sched.run();
  // Three slots: two pay the debt, one goes to the poller.
  CAF_CHECK_EQUAL(st().credits.debt(), 0);
  CAF_CHECK_EQUAL(st().credits.granted(), 3);
  CAF_CHECK(st().credits_balanced());
  caf::anon_send_exit(pool, caf::exit_reason::kill);
}

CAF_TEST_FIXTURE_SCOPE_END()
