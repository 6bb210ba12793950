// Deterministic tests of the domain supervisor's protocol (CAF test
// coordinator): credits, bounded dispatch, outcome routing, respawn after a
// handler crash, draining. The poller, writers and handlers are scheduled
// fakes injected through actors::spawners, so everything runs on the
// deterministic scheduler.

#define CAF_SUITE actors.supervisor
#include "cmdbus/actors/worker/supervisor.hpp"

#include "cmdbus/actors/errors.hpp"

#include "tests/actors/settings.hpp"
#include "tests/actors/sinks.hpp"

#include <caf/test/dsl.hpp>

using namespace cmdbus;
using namespace cmdbus::actors;

namespace {

// The children the supervisor spawned, for the test to address them.
struct children {
  poller_actor poller;
  completion_actor completion;
  retry_scheduler_actor retry;
  /// Every completion writer spawned (a dead one is replaced).
  std::vector<completion_actor> completions;
  std::vector<handler_actor> handlers;
  /// The mode each of `handlers` was spawned for.
  std::vector<handler_mode> modes;
  /// The msg_ids of every deferred delivery the retry scheduler was asked
  /// to claim, in order.
  std::vector<int64_t> claims;
};

// A handler that decides the outcome by command type: "ok", "transient",
// "permanent", "business", or "crash" (throws: the actor dies).
handler_actor::behavior_type fake_handler(handler_actor::pointer) {
  return {
    [](atom::handle, const command_ptr& rc) -> outcome {
      outcome out;
      auto& t = rc->cmd.command_type;
      if (t == "crash")
        throw std::runtime_error("handler crashed");
      if (t == "transient")
        out.kind = outcome_kind::transient;
      else if (t == "permanent")
        out.kind = outcome_kind::permanent;
      else if (t == "business")
        out.kind = outcome_kind::business_rule;
      out.error_code = t == "ok" ? "" : "E";
      return out;
    },
  };
}

retry_scheduler_actor::behavior_type
retry_sink(retry_scheduler_actor::pointer, std::shared_ptr<children> k) {
  return {
    [](atom::retry, const db::retry_command&) {},
    [](atom::flush) {},
    [](atom::extend, const std::vector<int64_t>&, int, bool) { return 0; },
    // Claims every deferred delivery given.
    [k](atom::claim, const std::vector<received_command>& xs) {
      std::vector<int64_t> claimed;
      for (auto& x : xs)
        claimed.push_back(x.msg_id);
      k->claims.insert(k->claims.end(), claimed.begin(), claimed.end());
      return claimed;
    },
  };
}

// The root's part: takes the batches the supervisor forwards.
batch_listener_actor::behavior_type
parent_sink(batch_listener_actor::pointer,
            std::shared_ptr<std::vector<uuid>> seen) {
  return {
    [seen](atom::batches, const std::string&, const std::vector<uuid>& ids) {
      seen->insert(seen->end(), ids.begin(), ids.end());
    },
  };
}

received_command make_rc(int64_t msg_id, const std::string& type,
                         int attempt = 1, int max_attempts = 3) {
  received_command rc;
  rc.cmd.domain = "d";
  rc.cmd.command_type = type;
  rc.cmd.command_id = uuid::random();
  rc.msg_id = msg_id;
  rc.attempt = attempt;
  rc.max_attempts = max_attempts;
  return rc;
}

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<children> kids = std::make_shared<children>();
  std::shared_ptr<std::vector<uuid>> batches_seen
    = std::make_shared<std::vector<uuid>>();
  domain_settings settings;
  batch_listener_actor parent;
  supervisor_actor sup;

  explicit fixture(std::shared_ptr<const handler_registry> registry
                   = std::make_shared<const handler_registry>(),
                   std::function<void(config::worker_config&)> tune = {}) {
    config::worker_config cfg;
    cfg.concurrency = 2;
    cfg.prefetch = 0;
    cfg.retry.backoff_seconds = {7};
    if (tune)
      tune(cfg);
    settings = test::make_settings(cfg, "d", std::move(registry));
    spawners sp;
    auto k = kids;
    sp.poller = [k](supervisor_actor::pointer self, const domain_settings&) {
      k->poller = self->spawn<caf::linked>(test::poller_sink);
      return k->poller;
    };
    sp.completion = [k](supervisor_actor::pointer self,
                        const domain_settings&) {
      k->completion = self->spawn<caf::linked>(test::completion_sink);
      k->completions.push_back(k->completion);
      return k->completion;
    };
    sp.retry = [k](supervisor_actor::pointer self, const domain_settings&) {
      k->retry = self->spawn<caf::linked>(retry_sink, k);
      return k->retry;
    };
    sp.handler = [k](supervisor_actor::pointer self, const domain_settings&,
                     handler_mode mode) {
      auto h = self->spawn<caf::linked>(fake_handler);
      k->handlers.push_back(h);
      k->modes.push_back(mode);
      return h;
    };
    parent = sys.spawn(parent_sink, batches_seen);
    sup = sys.spawn(supervisor, settings, sp, parent);
    sched.run();
  }

  ~fixture() {
    caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(parent, caf::exit_reason::user_shutdown);
  }

  supervisor_state& st() {
    return deref<supervisor_actor::stateful_base<supervisor_state>>(sup)
      .state;
  }

  // The handlers of `mode` (an empty registry uses only blocking ones).
  supervisor_state::pool& pool(handler_mode mode = handler_mode::blocking) {
    return st().pools[static_cast<size_t>(mode)];
  }

  // The mode of the handler that got the last (atom::handle) message.
  handler_mode mode_of(const handler_actor& h) const {
    for (size_t i = 0; i < kids->handlers.size(); ++i)
      if (kids->handlers[i] == h)
        return kids->modes[i];
    CAF_FAIL("not a handler of the supervisor");
  }

  // Sends commands 1..n of type "ok" to run in one batch; the supervisor
  // takes them and hands them to idle handlers (which have not run yet).
  void run_oks(int n) {
    std::vector<received_command> batch;
    for (int i = 1; i <= n; ++i)
      batch.push_back(make_rc(i, "ok"));
    self->send(sup, atom::run::value, std::move(batch));
    expect((atom::run, std::vector<received_command>),
           from(self).to(sup).with(_, _));
  }

  // Sends two commands to run; the supervisor takes them and hands them to
  // the two handlers (which have not run yet).
  void run_two(received_command a, received_command b) {
    self->send(sup, atom::run::value,
               std::vector<received_command>{std::move(a), std::move(b)});
    expect((atom::run, std::vector<received_command>),
           from(self).to(sup).with(_, _));
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(supervisor_tests, fixture)

CAF_TEST(it spawns the configured number of handlers and its children) {
  CAF_CHECK_EQUAL(kids->handlers.size(), 2u);
  CAF_CHECK_EQUAL(pool().idle.size(), 2u);
  CAF_CHECK(kids->poller != nullptr);
  CAF_CHECK(kids->completion != nullptr);
  CAF_CHECK(kids->retry != nullptr);
}

CAF_TEST(a freed handler returns its credit and the drain waits for the commit) {
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(1, "ok")});
  expect((atom::run, std::vector<received_command>),
         from(self).to(sup).with(_, _));
  CAF_CHECK_EQUAL(settings.metrics->in_flight.load(), 1);
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[0]).with(_, _));
  expect((outcome), from(kids->handlers[0]).to(sup).with(_));
  // The handler slot is free again: its credit goes back to the poller at
  // once (the pool is idle), and the command is no longer in flight ...
  expect((atom::credit, int64_t), from(sup).to(kids->poller).with(_, 1));
  expect((atom::finish, db::finished_command),
         from(sup).to(kids->completion).with(_, _));
  CAF_CHECK_EQUAL(settings.metrics->in_flight.load(), 0);
  CAF_CHECK(st().running.empty());
  CAF_CHECK_EQUAL(pool().idle.size(), 2u);
  // ... but it stays held until its side effects are committed.
  CAF_CHECK_EQUAL(st().held(), 1);
  caf::send_as(kids->completion, sup, atom::committed::value, int64_t{1});
  expect((atom::committed, int64_t), from(kids->completion).to(sup).with(_, 1));
  CAF_CHECK_EQUAL(st().held(), 0);
  disallow((atom::credit, int64_t), from(sup).to(kids->poller).with(_, _));
}

CAF_TEST(credits wait for the pool to run empty or for the flush interval) {
  run_two(make_rc(1, "ok"), make_rc(2, "ok"));
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[0]).with(_, _));
  // One slot frees while the other still runs (its handler has not even
  // picked the command up yet): the freed slot's credit waits ...
  expect((outcome), from(kids->handlers[0]).to(sup).with(_));
  expect((atom::finish, db::finished_command),
         from(sup).to(kids->completion).with(_, _));
  CAF_CHECK_EQUAL(st().credits.pending(), 1);
  // ... at most the flush interval, then goes out alone.
  CAF_REQUIRE(sched.trigger_timeout());
  expect((atom::credit_due, uint64_t), to(sup).with(_, _));
  expect((atom::credit, int64_t), from(sup).to(kids->poller).with(_, 1));
  CAF_CHECK_EQUAL(st().credits.pending(), 0);
  // The last running slot frees: the pool is empty, its credit goes at once.
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[1]).with(_, _));
  expect((outcome), from(kids->handlers[1]).to(sup).with(_));
  expect((atom::credit, int64_t), from(sup).to(kids->poller).with(_, 1));
}

CAF_TEST(slots freed together go back as one credit) {
  run_two(make_rc(1, "ok"), make_rc(2, "ok"));
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[0]).with(_, _));
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[1]).with(_, _));
  expect((outcome), from(kids->handlers[0]).to(sup).with(_));
  expect((atom::finish, db::finished_command),
         from(sup).to(kids->completion).with(_, _));
  expect((outcome), from(kids->handlers[1]).to(sup).with(_));
  // Both slots in one credit: the poller reads for the whole pool.
  expect((atom::credit, int64_t), from(sup).to(kids->poller).with(_, 2));
  expect((atom::finish, db::finished_command),
         from(sup).to(kids->completion).with(_, _));
  // The timer of the first slot is stale now: it sends nothing.
  CAF_REQUIRE(sched.trigger_timeout());
  expect((atom::credit_due, uint64_t), to(sup).with(_, _));
  disallow((atom::credit, int64_t), from(sup).to(kids->poller).with(_, _));
  CAF_CHECK_EQUAL(st().credits.pending(), 0);
}

CAF_TEST(outcomes are routed by kind) {
  run_two(make_rc(1, "transient", 1, 3), make_rc(2, "transient", 3, 3));
  // Both handlers run; the first has attempts left: retry with backoff.
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[0]).with(_, _));
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[1]).with(_, _));
  expect((outcome), from(kids->handlers[0]).to(sup).with(_));
  expect((atom::retry, db::retry_command),
         from(sup).to(kids->retry).with(_, _));
  // The second used its last attempt: exhausted, to the completion.
  expect((outcome), from(kids->handlers[1]).to(sup).with(_));
  expect((atom::finish, db::finished_command),
         from(sup).to(kids->completion).with(_, _));
  CAF_CHECK_EQUAL(st().held(), 2);
}

CAF_TEST(it never runs more commands than handlers) {
  run_oks(3);
  // Two handlers take two commands; the third waits in the backlog.
  CAF_CHECK_EQUAL(st().running.size(), 2u);
  CAF_CHECK_EQUAL(st().backlog.size(), 1u);
  CAF_CHECK(pool().idle.empty());
  CAF_CHECK_EQUAL(settings.metrics->in_flight.load(), 3);
  sched.run();
  CAF_CHECK(st().backlog.empty());
  CAF_CHECK_EQUAL(st().held(), 3);
  CAF_CHECK_EQUAL(settings.metrics->in_flight.load(), 0);
}

CAF_TEST(the lease heartbeat covers commands that wait for a handler) {
  // Prefetched commands (more than the handlers) wait in the backlog while
  // their visibility timeout runs: the heartbeat extends them like the
  // running ones. With a visibility timeout of 0 every held one is due.
  run_oks(3);
  CAF_REQUIRE_EQUAL(st().running.size(), 2u);
  CAF_REQUIRE_EQUAL(st().backlog.size(), 1u);
  test::retune(st().settings, [](config::worker_config& c) {
    c.visibility_timeout = std::chrono::seconds{0};
  });
  self->send(sup, atom::heartbeat::value);
  expect((atom::heartbeat), from(self).to(sup));
  expect((atom::extend, std::vector<int64_t>, int, bool),
         from(sup)
             .to(kids->retry)
             .with(_, std::vector<int64_t>{1, 2, 3}, 0, true));
  sched.run();
  CAF_CHECK(st().backlog.empty());
}

CAF_TEST(the lease heartbeat claims deferred deliveries before extending) {
  // Deferred deliveries (docs/worker.md, "Deferred claims") held for a
  // heartbeat period are claimed first, in the same mailbox as the
  // extension that follows, and are then held as claimed ones.
  std::vector<received_command> batch;
  for (int i = 1; i <= 3; ++i) {
    auto rc = make_rc(i, "ok");
    rc.deferred = true;
    batch.push_back(rc);
  }
  batch[2].deferred = false;
  self->send(sup, atom::run::value, std::move(batch));
  expect((atom::run, std::vector<received_command>), from(self).to(sup));
  test::retune(st().settings, [](config::worker_config& c) {
    c.visibility_timeout = std::chrono::seconds{0};
  });
  // Held for a heartbeat period (at least 100 ms); no timer fires.
  sched.clock().current_time += std::chrono::milliseconds{100};
  self->send(sup, atom::heartbeat::value);
  expect((atom::heartbeat), from(self).to(sup));
  expect((atom::claim, std::vector<received_command>),
         from(sup).to(kids->retry));
  CAF_CHECK_EQUAL(kids->claims, (std::vector<int64_t>{1, 2}));
  expect((atom::extend, std::vector<int64_t>, int, bool),
         from(sup)
             .to(kids->retry)
             .with(_, std::vector<int64_t>{1, 2, 3}, 0, true));
  expect((std::vector<int64_t>), from(kids->retry).to(sup));
  for (auto& [delivery, run] : st().running)
    CAF_CHECK(!run.rc->deferred);
  for (auto& w : st().backlog)
    CAF_CHECK(!w.rc->deferred);
}

CAF_TEST(a crashed handler is replaced and its slot released) {
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(9, "crash")});
  sched.run();
  // The handler died; the supervisor released the slot (the message
  // reappears after its visibility timeout) and respawned the handler.
  CAF_CHECK_EQUAL(st().held(), 0);
  CAF_CHECK_EQUAL(settings.metrics->in_flight.load(), 0);
  CAF_CHECK_EQUAL(settings.metrics->handler_restarts.load(), 1);
  CAF_CHECK_EQUAL(pool().all.size(), 2u);
  CAF_CHECK_EQUAL(pool().idle.size(), 2u);
  CAF_CHECK_EQUAL(kids->handlers.size(), 3u);
}

CAF_TEST(drain stops intake and answers once nothing is held) {
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(1, "ok")});
  sched.run();
  CAF_CHECK_EQUAL(st().held(), 1);
  self->send(sup, atom::drain::value);
  expect((atom::drain), from(self).to(sup).with(_));
  // Intake stops and the writers are told to flush; no answer yet.
  expect((atom::flush), from(sup).to(kids->completion).with(_));
  expect((atom::flush), from(sup).to(kids->retry).with(_));
  CAF_CHECK(st().draining);
  CAF_CHECK(st().poller == nullptr);
  CAF_CHECK_EQUAL(self->mailbox().size(), 0u);
  // The last side effect commits: the drain is answered, no credit goes
  // out any more.
  caf::send_as(kids->completion, sup, atom::committed::value, int64_t{1});
  sched.run();
  CAF_CHECK_EQUAL(st().held(), 0);
  CAF_REQUIRE_EQUAL(self->mailbox().size(), 1u);
  self->receive([](atom::done) {});
}

CAF_TEST(credits stop at the hold limit until side effects commit) {
  // Concurrency 2, no prefetch: at most 4 x 2 = 8 messages without
  // committed side effects. Eight commands ran and wait for their commit:
  // the freed slots go back as credits only as far as the limit allows.
  for (int round = 1; round <= 3; ++round) {
    run_oks(2);
    sched.run();
  }
  CAF_CHECK_EQUAL(st().held(), 6);
  CAF_CHECK_EQUAL(st().credits.granted(), 2);
  run_oks(2);
  sched.run();
  CAF_CHECK_EQUAL(st().held(), 8);
  // Both slots are free, but nothing may be read: no credit is out.
  CAF_CHECK_EQUAL(st().credits.granted(), 0);
  CAF_CHECK_EQUAL(st().credits.pending(), 2);
  CAF_CHECK(st().credits.withheld());
  // One side effect commits: one credit goes out at once.
  caf::send_as(kids->completion, sup, atom::committed::value, int64_t{1});
  expect((atom::committed, int64_t), from(kids->completion).to(sup).with(_, 1));
  expect((atom::credit, int64_t), from(sup).to(kids->poller).with(_, 1));
  CAF_CHECK_EQUAL(st().credits.pending(), 1);
  caf::send_as(kids->completion, sup, atom::committed::value, int64_t{7});
  expect((atom::committed, int64_t), from(kids->completion).to(sup).with(_, 7));
  expect((atom::credit, int64_t), from(sup).to(kids->poller).with(_, 1));
  CAF_CHECK_EQUAL(st().held(), 0);
  CAF_CHECK(!st().credits.withheld());
}

CAF_TEST(a message read again while its first delivery runs is tracked twice) {
  // The same msg_id twice (its visibility timeout expired during the first
  // delivery): the first completion must not end the second's lease.
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(7, "ok", 1),
                                           make_rc(7, "ok", 2)});
  expect((atom::run, std::vector<received_command>),
         from(self).to(sup).with(_, _));
  CAF_REQUIRE_EQUAL(st().running.size(), 2u);
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[0]).with(_, _));
  expect((outcome), from(kids->handlers[0]).to(sup).with(_));
  CAF_REQUIRE_EQUAL(st().running.size(), 1u);
  CAF_CHECK_EQUAL(st().running.begin()->second.rc->attempt, 2);
  test::retune(st().settings, [](config::worker_config& c) {
    c.visibility_timeout = std::chrono::seconds{0};
  });
  self->send(sup, atom::heartbeat::value);
  expect((atom::heartbeat), from(self).to(sup));
  expect((atom::extend, std::vector<int64_t>, int, bool),
         from(sup).to(kids->retry).with(_, std::vector<int64_t>{7}, 0, true));
}

CAF_TEST(a dead writer is replaced and what it held is released) {
  run_oks(1);
  sched.run();
  CAF_REQUIRE_EQUAL(st().completion_log.pending.size(), 1u);
  auto old = kids->completion;
  caf::anon_send_exit(old, caf::exit_reason::unhandled_exception);
  sched.run();
  CAF_REQUIRE_EQUAL(kids->completions.size(), 2u);
  CAF_CHECK(st().completion == kids->completions[1]);
  CAF_CHECK(st().completion != old);
  // The lost side effect reappears with its message: nothing is held.
  CAF_CHECK_EQUAL(st().held(), 0);
  // The domain goes on: the next outcome goes to the new writer.
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(2, "ok")});
  sched.run();
  CAF_CHECK_EQUAL(st().completion_log.pending.size(), 1u);
}

CAF_TEST(a writer stuck while the database answers ends the domain) {
  // Stuck after three statement timeouts: just over 10 s.
  test::retune(st().settings, [](config::worker_config& c) {
    c.statement_timeout = std::chrono::milliseconds{3334};
  });
  self->monitor(sup);
  run_oks(1);
  sched.run();
  CAF_REQUIRE_EQUAL(st().completion_log.pending.size(), 1u);
  // An outage is not stuck: the writer reports the database unavailable.
  sched.advance_time(std::chrono::seconds{8});
  caf::send_as(kids->completion, sup, atom::unavailable::value);
  sched.run();
  sched.advance_time(std::chrono::seconds{8});
  self->send(sup, atom::heartbeat::value);
  sched.run();
  CAF_CHECK_EQUAL(self->mailbox().size(), 0u);
  // No report and no progress for longer than stuck_after: the domain
  // ends (the root restarts it), taking its children with it.
  sched.advance_time(std::chrono::seconds{3});
  self->send(sup, atom::heartbeat::value);
  sched.run();
  CAF_REQUIRE_EQUAL(self->mailbox().size(), 1u);
  self->receive([](caf::down_msg& dm) {
    CAF_CHECK_EQUAL(dm.reason, caf::make_error(ec::writer_stuck));
  });
}

CAF_TEST(handlers extend their lease through the supervisor) {
  // Sent as the handler (untyped: a handler takes no int, the answer goes
  // nowhere here).
  auto h = caf::actor_cast<caf::actor>(kids->handlers[0]);
  caf::send_as(h, sup, atom::extend::value, std::vector<int64_t>{5}, 60,
               false);
  expect((atom::extend, std::vector<int64_t>, int, bool),
         from(h).to(sup).with(_, std::vector<int64_t>{5}, 60, false));
  // Forwarded to the current retry scheduler, which answers the handler.
  expect((atom::extend, std::vector<int64_t>, int, bool),
         from(h).to(kids->retry).with(_, std::vector<int64_t>{5}, 60, false));
}

CAF_TEST(completed batches go up to the root) {
  auto id = uuid::random();
  caf::send_as(kids->completion, sup, atom::batches::value, std::string{"d"},
               std::vector<uuid>{id});
  sched.run();
  CAF_REQUIRE_EQUAL(batches_seen->size(), 1u);
  CAF_CHECK_EQUAL((*batches_seen)[0], id);
}

CAF_TEST(ending the supervisor ends its children) {
  for (auto& h : kids->handlers)
    self->monitor(h);
  self->monitor(kids->poller);
  self->monitor(kids->completion);
  self->monitor(kids->retry);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  sched.run();
  size_t ended = 0;
  while (!self->mailbox().empty())
    self->receive([&](caf::down_msg&) { ++ended; });
  CAF_CHECK_EQUAL(ended, kids->handlers.size() + 3);
}

CAF_TEST(backoff follows the schedule and clamps to its last entry) {
  std::mt19937_64 rng{1};
  config::retry_config retry;
  retry.backoff_seconds = {10, 60, 300};
  CAF_CHECK_EQUAL(backoff_seconds(retry, 1, rng), 10);
  CAF_CHECK_EQUAL(backoff_seconds(retry, 2, rng), 60);
  CAF_CHECK_EQUAL(backoff_seconds(retry, 3, rng), 300);
  CAF_CHECK_EQUAL(backoff_seconds(retry, 9, rng), 300);
  retry.backoff_seconds = {};
  CAF_CHECK_EQUAL(backoff_seconds(retry, 1, rng), 30);
  retry.backoff_seconds = {100};
  retry.jitter = 0.1;
  for (int i = 0; i < 50; ++i) {
    auto b = backoff_seconds(retry, 1, rng);
    CAF_CHECK_GREATER_OR_EQUAL(b, 90);
    CAF_CHECK_LESS_OR_EQUAL(b, 110);
  }
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

std::shared_ptr<const handler_registry>
registry_of(std::initializer_list<std::pair<const char*, handler_mode>> types) {
  auto reg = std::make_shared<handler_registry>();
  for (auto& [type, mode] : types)
    reg->add(
        "d", type, [](const command&, handler_context&) { return json{}; },
        mode);
  return reg;
}

// A domain with blocking ("ok") and non-blocking ("fast", "crash")
// handlers.
struct mixed_fixture : fixture {
  mixed_fixture()
      : fixture(registry_of({{"ok", handler_mode::blocking},
                             {"fast", handler_mode::non_blocking},
                             {"crash", handler_mode::non_blocking}})) {
    // nop
  }
};

// A domain of three handler slots whose types "slow" and "crash" may run
// one command at a time each ([domains.d.types.T] concurrency = 1).
struct capped_fixture : fixture {
  capped_fixture()
    : fixture(
      std::make_shared<const handler_registry>(),
      [](config::worker_config& cfg) {
        cfg.concurrency = 3;
        cfg.scheduling["d"].type_concurrency = {{"slow", 1}, {"crash", 1}};
      }) {
    // nop
  }
};

// A domain with only non-blocking handlers.
struct non_blocking_fixture : fixture {
  non_blocking_fixture()
      : fixture(registry_of({{"fast", handler_mode::non_blocking}})) {
    // nop
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(handler_mode_tests, mixed_fixture)

CAF_TEST(each handler mode gets its own pool of concurrency handlers) {
  CAF_CHECK_EQUAL(pool(handler_mode::blocking).all.size(), 2u);
  CAF_CHECK_EQUAL(pool(handler_mode::non_blocking).all.size(), 2u);
  CAF_REQUIRE_EQUAL(kids->modes.size(), 4u);
  CAF_CHECK(kids->modes[0] == handler_mode::blocking);
  CAF_CHECK(kids->modes[3] == handler_mode::non_blocking);
}

CAF_TEST(commands run on a handler of their handler mode) {
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(1, "fast"), make_rc(2, "ok"),
                                           make_rc(3, "unregistered")});
  expect((atom::run, std::vector<received_command>),
         from(self).to(sup).with(_, _));
  CAF_REQUIRE_EQUAL(st().running.size(), 3u);
  CAF_CHECK(mode_of(st().running[1].handler) == handler_mode::non_blocking);
  CAF_CHECK(mode_of(st().running[2].handler) == handler_mode::blocking);
  // Without a handler it fails at once: the domain's blocking pool runs it.
  CAF_CHECK(mode_of(st().running[3].handler) == handler_mode::blocking);
  sched.run();
  CAF_CHECK(st().running.empty());
  CAF_CHECK_EQUAL(pool(handler_mode::blocking).idle.size(), 2u);
  CAF_CHECK_EQUAL(pool(handler_mode::non_blocking).idle.size(), 2u);
  CAF_CHECK_EQUAL(st().held(), 3);
}

CAF_TEST(commands wait in order when their pool is busy) {
  std::vector<received_command> batch;
  batch.push_back(make_rc(1, "fast"));
  batch.push_back(make_rc(2, "fast"));
  batch.push_back(make_rc(3, "fast"));
  batch.push_back(make_rc(4, "ok"));
  self->send(sup, atom::run::value, std::move(batch));
  expect((atom::run, std::vector<received_command>),
         from(self).to(sup).with(_, _));
  // Two "fast" run; the third waits for a non-blocking handler and the
  // "ok" behind it waits too (commands start in the order read).
  CAF_CHECK_EQUAL(st().running.size(), 2u);
  CAF_CHECK_EQUAL(st().backlog.size(), 2u);
  sched.run();
  CAF_CHECK(st().backlog.empty());
  CAF_CHECK(st().running.empty());
  CAF_CHECK_EQUAL(st().held(), 4);
}

CAF_TEST(a crashed handler is replaced in its own mode) {
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(5, "crash")});
  expect((atom::run, std::vector<received_command>),
         from(self).to(sup).with(_, _));
  CAF_REQUIRE(mode_of(st().running[1].handler) == handler_mode::non_blocking);
  sched.run();
  CAF_CHECK_EQUAL(settings.metrics->handler_restarts.load(), 1);
  CAF_CHECK_EQUAL(pool(handler_mode::blocking).all.size(), 2u);
  CAF_CHECK_EQUAL(pool(handler_mode::non_blocking).all.size(), 2u);
  CAF_REQUIRE_EQUAL(kids->modes.size(), 5u);
  CAF_CHECK(kids->modes[4] == handler_mode::non_blocking);
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST_FIXTURE_SCOPE(non_blocking_tests, non_blocking_fixture)

CAF_TEST(a domain with only non-blocking handlers spawns no blocking ones) {
  CAF_CHECK(pool(handler_mode::blocking).all.empty());
  CAF_CHECK_EQUAL(pool(handler_mode::non_blocking).all.size(), 2u);
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(1, "unregistered")});
  expect((atom::run, std::vector<received_command>),
         from(self).to(sup).with(_, _));
  CAF_REQUIRE_EQUAL(st().running.size(), 1u);
  CAF_CHECK(mode_of(st().running[1].handler) == handler_mode::non_blocking);
}

CAF_TEST_FIXTURE_SCOPE_END()

CAF_TEST_FIXTURE_SCOPE(type_cap_tests, capped_fixture)

CAF_TEST(a capped type runs up to its cap and the others pass it) {
  // Two "slow" (cap 1) ahead of an "ok": the first slow and the ok start,
  // the second slow waits for its type's slot without holding the ok back.
  self->send(sup, atom::run::value,
             std::vector<received_command>{
               make_rc(1, "slow"), make_rc(2, "slow"), make_rc(3, "ok")});
  expect((atom::run, std::vector<received_command>),
         from(self).to(sup).with(_, _));
  CAF_CHECK_EQUAL(st().caps["slow"].limit, 1);
  CAF_CHECK_EQUAL(st().caps["slow"].running, 1);
  CAF_CHECK_EQUAL(st().caps["slow"].held, 2);
  CAF_REQUIRE_EQUAL(st().backlog.size(), 1u);
  CAF_CHECK_EQUAL(st().backlog.front().rc->msg_id, 2);
  CAF_CHECK_EQUAL(st().running.size(), 2u);
  CAF_CHECK_EQUAL(pool().idle.size(), 1u);
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[0]).with(_, _));
  expect((atom::handle, command_ptr),
         from(sup).to(kids->handlers[1]).with(_, _));
  // The first slow finishes: its cap's slot goes back to the poller and
  // the second slow starts (the ok still runs).
  expect((outcome), from(kids->handlers[0]).to(sup).with(_));
  expect((atom::credit, std::string, int64_t),
         from(sup).to(kids->poller).with(_, std::string{"slow"}, 1));
  CAF_CHECK(st().backlog.empty());
  CAF_CHECK_EQUAL(st().caps["slow"].running, 1);
  CAF_CHECK_EQUAL(st().caps["slow"].held, 1);
  CAF_CHECK_EQUAL(st().running.size(), 2u);
  // The ok finishes: no cap is involved.
  expect((outcome), from(kids->handlers[1]).to(sup).with(_));
  CAF_CHECK_EQUAL(st().caps["slow"].running, 1);
  sched.run();
  CAF_CHECK_EQUAL(st().caps["slow"].running, 0);
  CAF_CHECK_EQUAL(st().caps["slow"].held, 0);
}

CAF_TEST(a capped command whose handler dies gives its slot back) {
  self->send(sup, atom::run::value,
             std::vector<received_command>{make_rc(9, "crash")});
  expect((atom::run, std::vector<received_command>),
         from(self).to(sup).with(_, _));
  CAF_CHECK_EQUAL(st().caps["crash"].running, 1);
  sched.run();
  CAF_CHECK_EQUAL(st().caps["crash"].running, 0);
  CAF_CHECK_EQUAL(st().caps["crash"].held, 0);
  CAF_CHECK_EQUAL(settings.metrics->handler_restarts.load(), 1);
}

CAF_TEST_FIXTURE_SCOPE_END()

// -- prefetch = auto ---------------------------------------------------------

namespace {

// Concurrency 2, `prefetch = auto`.
struct auto_prefetch_fixture : fixture {
  auto_prefetch_fixture()
    : fixture(std::make_shared<const handler_registry>(),
              [](config::worker_config& cfg) {
                cfg.prefetch = config::prefetch_auto;
              }) {
  }

  // Runs two "ok" commands (msg_ids `first` and `first` + 1) whose handlers
  // take `took` each (the test clock moves while they run), then lets the
  // supervisor take their outcomes and everything that follows.
  void run_pair(int64_t first, caf::timespan took) {
    run_two(make_rc(first, "ok"), make_rc(first + 1, "ok"));
    expect((atom::handle, command_ptr),
           from(sup).to(kids->handlers[0]).with(_, _));
    expect((atom::handle, command_ptr),
           from(sup).to(kids->handlers[1]).with(_, _));
    sched.advance_time(took);
    sched.run();
    // Commit everything handed to the completion writer so far.
    caf::send_as(kids->completion, sup, atom::committed::value,
                 static_cast<int64_t>(st().completion_log.pending.size()));
    sched.run();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(auto_prefetch_tests, auto_prefetch_fixture)

CAF_TEST(the auto prefetch follows the measured slot time and keeps the credits balanced) {
  CAF_CHECK(st().auto_prefetch);
  CAF_CHECK_EQUAL(st().prefetch, 0);
  CAF_CHECK_EQUAL(settings.metrics->prefetch.load(), 0);
  // Quick handlers (1 ms a command): 2 slots x 100 ms / 1 ms = 200 read
  // ahead. The extra credits go to the poller at once.
  run_pair(1, std::chrono::milliseconds{1});
  CAF_CHECK_EQUAL(st().prefetch, 200);
  CAF_CHECK_EQUAL(settings.metrics->prefetch.load(), 200);
  CAF_CHECK(st().credits_balanced());
  CAF_CHECK_EQUAL(st().credits.granted(), 202);
  // Slow ones (2 s a command): a few evaluations later nothing is read
  // ahead any more. The poller holds more credits than the new capacity:
  // they become a debt that the next freed slots pay.
  for (int64_t i = 0; i < 8; ++i)
    run_pair(10 + 2 * i, std::chrono::seconds{2});
  CAF_CHECK_EQUAL(st().prefetch, 0);
  CAF_CHECK_EQUAL(settings.metrics->prefetch.load(), 0);
  CAF_CHECK(st().credits_balanced());
  CAF_CHECK_GREATER(st().credits.debt(), 0);
  // No slot was ever lost: both handlers are idle, nothing is held.
  CAF_CHECK_EQUAL(pool().idle.size(), 2u);
  CAF_CHECK_EQUAL(st().held(), 0);
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

// Concurrency 2, a fixed prefetch of 3: never resized.
struct fixed_prefetch_fixture : fixture {
  fixed_prefetch_fixture()
    : fixture(std::make_shared<const handler_registry>(),
              [](config::worker_config& cfg) { cfg.prefetch = 3; }) {
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(fixed_prefetch_tests, fixed_prefetch_fixture)

CAF_TEST(a fixed prefetch is never resized) {
  CAF_CHECK(!st().auto_prefetch);
  CAF_CHECK_EQUAL(st().prefetch, 3);
  run_two(make_rc(1, "ok"), make_rc(2, "ok"));
  sched.advance_time(std::chrono::milliseconds{1});
  sched.run();
  CAF_CHECK_EQUAL(st().prefetch, 3);
  CAF_CHECK(st().credits_balanced());
}

CAF_TEST_FIXTURE_SCOPE_END()
