// Deterministic tests of the process reply router and its process actors
// (CAF test coordinator): replies are routed by correlation id, one at a
// time per process and in parallel across processes; messages that are not
// replies are archived; only the router that sweeps asks for TSQ sweeps;
// credits bound the replies in flight; an idle process actor is stopped
// unless a reply for it is on the way (and one arriving afterwards gets a
// new actor); a database outage makes the process actor try the same reply
// again; a drain waits for the replies in flight. The database is replaced
// by a fake queue and fake writers that answer when the test says so. And a
// real process writer facing a database that refuses every connection backs
// off as the completion writer does (its clock, its cap).

#define CAF_SUITE actors.process_router
#include "cmdbus/process/router.hpp"

#include <caf/test/dsl.hpp>

#include <deque>

#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/process/process_actor.hpp"
#include "cmdbus/process/process_writer.hpp"

using namespace cmdbus;
using namespace cmdbus::actors;
using namespace std::chrono_literals;

namespace {

// The reply queue behind the fake io.
struct fake_queue {
  std::deque<raw_reply> waiting;
  std::vector<int> reads;
  std::vector<int64_t> archived;
  int64_t next_msg_id = 1;

  void add(const std::string& body) {
    waiting.push_back({next_msg_id++, 1, body});
  }

  std::vector<raw_reply> read(int, int qty) {
    reads.push_back(qty);
    std::vector<raw_reply> out;
    while (!waiting.empty() && static_cast<int>(out.size()) < qty) {
      out.push_back(waiting.front());
      waiting.pop_front();
    }
    return out;
  }
};

std::string reply_body(const uuid& process,
                       const std::string& outcome = "SUCCESS") {
  return R"({"command_id":")" + uuid::random().to_string()
         + R"(","correlation_id":")" + process.to_string() + R"(","outcome":")"
         + outcome + R"(","result":null})";
}

// What the fake writers were asked, and the answers the test still owes.
// Answers are delivered by the writer itself (a response promise belongs to
// its actor): the test marks them ready and pokes the writer.
struct writer_log {
  struct pending {
    uuid process;
    int64_t msg_id;
    caf::typed_response_promise<apply_outcome> rp;
  };
  std::vector<pending> applies;
  std::vector<std::pair<pending, apply_outcome>> ready;
  int sweeps = 0;

  /// Marks the oldest open apply of `process` to be answered with `o`.
  bool mark(const uuid& process, apply_outcome o) {
    for (auto i = applies.begin(); i != applies.end(); ++i) {
      if (i->process != process)
        continue;
      ready.emplace_back(*i, std::move(o));
      applies.erase(i);
      return true;
    }
    return false;
  }

  size_t open_for(const uuid& process) const {
    size_t n = 0;
    for (auto& a : applies)
      if (a.process == process)
        ++n;
    return n;
  }
};

process_writer_actor::behavior_type
fake_writer(process_writer_actor::pointer self,
            std::shared_ptr<writer_log> log) {
  return {
    [self, log](atom::apply,
                const process_reply_message& m) -> caf::result<apply_outcome> {
      auto rp = self->make_response_promise<apply_outcome>();
      log->applies.push_back({m.process_id, m.msg_id, rp});
      return rp;
    },
    [log](atom::sweep) -> int64_t {
      if (log->ready.empty()) {
        ++log->sweeps;
        return 0;
      }
      // The test's poke: deliver the answers it marked.
      auto ready = std::move(log->ready);
      log->ready.clear();
      for (auto& [p, o] : ready)
        p.rp.deliver(std::move(o));
      return 0;
    },
    [](atom::flush) {},
  };
}

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<fake_queue> queue = std::make_shared<fake_queue>();
  std::shared_ptr<writer_log> writers = std::make_shared<writer_log>();
  config::worker_config cfg;
  process_settings settings;
  process_router_actor aut;

  fixture() {
    cfg.poll_interval = 1000ms;
    cfg.use_notify = false;
    settings.domain = "d";
    settings.queue = "d__process_replies";
    settings.registry = std::make_shared<const process_registry>();
    settings.writers = 1;
    settings.max_in_flight = 4;
    settings.idle_after = 200ms;
    settings.sweep_every = 1h;
  }

  ~fixture() {
    if (aut)
      caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
    sched.run();
  }

  void start() {
    settings.cfg = std::make_shared<const config::worker_config>(cfg);
    auto q = queue;
    router_io io;
    io.read = [q](int vt, int qty) { return q->read(vt, qty); };
    io.archive = [q](int64_t id) { q->archived.push_back(id); };
    auto log = writers;
    aut = sys.spawn(
      process_router, settings, io,
      process_writer_spawner{
        [log](process_router_actor::pointer router, const process_settings&) {
          return router->spawn<caf::linked>(fake_writer, log);
        }});
    sched.run();
  }

  process_router_state& st() {
    return deref<process_router_actor::stateful_base<process_router_state>>(aut)
      .state;
  }

  void wakeup() {
    self->send(aut, atom::wakeup::value);
    sched.run();
  }

  /// Answers the oldest open apply of `process` with `o`.
  bool answer(const uuid& process, apply_outcome o = {}) {
    if (!writers->mark(process, std::move(o)))
      return false;
    caf::anon_send(st().writers.front(), atom::sweep::value);
    sched.run();
    return true;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(process_router_tests, fixture)

CAF_TEST(replies go to their process one at a time) {
  auto p1 = uuid::random();
  auto p2 = uuid::random();
  queue->add(reply_body(p1));
  queue->add(reply_body(p1));
  queue->add(reply_body(p2));
  start();
  // One actor per process; each hands one reply to the writer at a time.
  CAF_CHECK_EQUAL(st().processes.size(), 2u);
  CAF_CHECK_EQUAL(st().in_flight, 3);
  CAF_CHECK_EQUAL(writers->open_for(p1), 1u);
  CAF_CHECK_EQUAL(writers->open_for(p2), 1u);
  CAF_CHECK_EQUAL(writers->applies.front().msg_id, 1);
  CAF_CHECK(answer(p1));
  sched.run();
  // p1's second reply follows its first.
  CAF_CHECK_EQUAL(writers->open_for(p1), 1u);
  CAF_CHECK_EQUAL(st().in_flight, 2);
  CAF_CHECK(answer(p1));
  CAF_CHECK(answer(p2));
  sched.run();
  CAF_CHECK_EQUAL(st().in_flight, 0);
  CAF_CHECK(writers->applies.empty());
  // The initial sweep went to the writer.
  CAF_CHECK_EQUAL(writers->sweeps, 1);
}

CAF_TEST(only the router that sweeps asks its writer for sweeps) {
  // A router of a type's own reply queue leaves the sweep to the domain's
  // shared queue's router.
  settings.sweep_tsq = false;
  auto p = uuid::random();
  queue->add(reply_body(p));
  start();
  CAF_CHECK_EQUAL(writers->open_for(p), 1u);
  CAF_CHECK_EQUAL(writers->sweeps, 0);
}

CAF_TEST(messages that are no replies are archived) {
  queue->add("not json");
  queue->add(R"({"command_id":")" + uuid::random().to_string()
             + R"(","outcome":"SUCCESS"})");
  auto p = uuid::random();
  queue->add(reply_body(p));
  start();
  CAF_CHECK_EQUAL(queue->archived, (std::vector<int64_t>{1, 2}));
  CAF_CHECK_EQUAL(st().processes.size(), 1u);
  CAF_CHECK_EQUAL(writers->open_for(p), 1u);
}

CAF_TEST(credits bound the replies in flight) {
  std::vector<uuid> ps;
  for (int i = 0; i < 6; ++i) {
    ps.push_back(uuid::random());
    queue->add(reply_body(ps.back()));
  }
  start();
  CAF_CHECK_EQUAL(queue->reads, std::vector<int>{4});
  CAF_CHECK_EQUAL(st().in_flight, 4);
  wakeup(); // no credit: no read
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  CAF_CHECK(answer(ps[0]));
  // One freed credit does not read yet: reads refill at half the credits.
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  CAF_CHECK_EQUAL(st().in_flight, 3);
  CAF_CHECK(answer(ps[1]));
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{4, 2}));
  CAF_CHECK_EQUAL(st().in_flight, 4);
  CAF_CHECK(queue->waiting.empty());
}

CAF_TEST(an idle process actor stops unless a reply is on its way) {
  auto p = uuid::random();
  queue->add(reply_body(p));
  start();
  auto first = st().processes.at(p).actor;
  // Idle while its reply is with the writer: the router keeps it.
  self->send(aut, atom::idle::value, p);
  sched.run();
  CAF_CHECK_EQUAL(st().processes.count(p), 1u);
  CAF_CHECK(answer(p));
  sched.run();
  CAF_CHECK_EQUAL(st().processes.at(p).pending, 0);
  // Nothing for idle_after: it reports idle and is stopped.
  CAF_CHECK(sched.trigger_timeout());
  sched.run();
  CAF_CHECK_EQUAL(st().processes.count(p), 0u);
  // A later reply for the same process gets a new actor.
  queue->add(reply_body(p));
  wakeup();
  CAF_REQUIRE_EQUAL(st().processes.count(p), 1u);
  CAF_CHECK_NOT_EQUAL(st().processes.at(p).actor, first);
  CAF_CHECK_EQUAL(writers->open_for(p), 1u);
}

CAF_TEST(a reply arriving while its actor reports idle is not lost) {
  // The actor reported idle (nothing pending then); before the router sees
  // that report, a new reply is routed to the same actor: the report is
  // stale and the actor stays.
  auto p = uuid::random();
  queue->add(reply_body(p));
  start();
  CAF_CHECK(answer(p));
  sched.run();
  auto actor = st().processes.at(p).actor;
  queue->add(reply_body(p));
  // The read routes the reply (pending 1) before the idle report arrives.
  self->send(aut, atom::wakeup::value);
  self->send(aut, atom::idle::value, p);
  sched.run();
  CAF_REQUIRE_EQUAL(st().processes.count(p), 1u);
  CAF_CHECK_EQUAL(st().processes.at(p).actor, actor);
  CAF_CHECK_EQUAL(writers->open_for(p), 1u);
  CAF_CHECK(answer(p));
  sched.run();
  CAF_CHECK_EQUAL(st().in_flight, 0);
}

CAF_TEST(a database outage retries the same reply) {
  auto p = uuid::random();
  queue->add(reply_body(p));
  start();
  apply_outcome later;
  later.kind = apply_kind::retry;
  later.retry_after = 50ms;
  CAF_CHECK(answer(p, later));
  sched.run();
  CAF_CHECK_EQUAL(writers->open_for(p), 0u);
  CAF_CHECK_EQUAL(st().in_flight, 1);
  // After the backoff, the same message again.
  CAF_CHECK(sched.trigger_timeout());
  sched.run();
  CAF_REQUIRE_EQUAL(writers->open_for(p), 1u);
  CAF_CHECK_EQUAL(writers->applies.front().msg_id, 1);
  CAF_CHECK(answer(p));
  sched.run();
  CAF_CHECK_EQUAL(st().in_flight, 0);
}

CAF_TEST(a drain waits for the replies in flight) {
  auto p = uuid::random();
  queue->add(reply_body(p));
  start();
  self->send(aut, atom::drain::value);
  sched.run();
  CAF_CHECK_EQUAL(self->mailbox().size(), 0u);
  CAF_CHECK(st().draining);
  // No reads while draining.
  queue->add(reply_body(uuid::random()));
  wakeup();
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  CAF_CHECK(answer(p));
  sched.run();
  CAF_REQUIRE_EQUAL(self->mailbox().size(), 1u);
  self->receive([](atom::done) {});
}

CAF_TEST(a process actor that dies gives its credits back) {
  auto p = uuid::random();
  queue->add(reply_body(p));
  start();
  // As when its code throws: it ends with an error.
  caf::anon_send_exit(st().processes.at(p).actor,
                      caf::exit_reason::unhandled_exception);
  sched.run();
  CAF_CHECK_EQUAL(st().processes.count(p), 0u);
  CAF_CHECK_EQUAL(st().in_flight, 0);
  // The router lives on.
  queue->add(reply_body(p));
  wakeup();
  CAF_CHECK_EQUAL(st().processes.count(p), 1u);
}

CAF_TEST_FIXTURE_SCOPE_END()

namespace {

// A real process writer whose database refuses every connection (nothing
// listens on port 1), and the replies it is asked to apply.
struct writer_fixture : test_coordinator_fixture<> {
  std::shared_ptr<domain_metrics> metrics
    = std::make_shared<domain_metrics>("d", 1, std::vector<std::string>{});
  domain_settings completion_side;
  process_writer_actor writer;

  writer_fixture() {
    config::worker_config cfg;
    cfg.dsn = "host=127.0.0.1 port=1 dbname=cmdbus user=cmdbus "
              "connect_timeout=2";
    auto shared = std::make_shared<const config::worker_config>(cfg);
    process_settings settings;
    settings.domain = "d";
    settings.queue = "d__process_replies";
    settings.cfg = shared;
    settings.registry = std::make_shared<const process_registry>();
    settings.metrics = metrics;
    completion_side.domain = "d";
    completion_side.cfg = shared;
    writer = sys.spawn(process_writer, settings, apply_fn{}, sweep_fn{});
    sched.run();
  }

  ~writer_fixture() {
    caf::anon_send_exit(writer, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// Asks the writer to apply a reply; returns its answer.
  apply_outcome apply() {
    process_reply_message m;
    m.msg_id = 1;
    m.read_ct = 1;
    m.process_id = uuid::random();
    apply_outcome out;
    out.kind = apply_kind::applied;
    auto answer = self->request(writer, caf::infinite, atom::apply::value, m);
    sched.run();
    answer.receive([&](apply_outcome& o) { out = std::move(o); },
                   [&](caf::error& err) { out.note = to_string(err); });
    return out;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(process_writer_tests, writer_fixture)

// A long outage (a failover: the old primary gone, the new one not yet
// promoted) is many failed attempts in a row. Each reply asked for after
// the backoff the writer answered makes one attempt, and the backoff never
// grows beyond the completion writer's: once the database is back, the
// processes move on no later than the commands' outcomes are written.
CAF_TEST(a process writer backs off as the completion writer does) {
  auto cap = session_for(completion_side, "cmdbus-worker").max_backoff;
  for (int attempt = 1; attempt <= 12; ++attempt) {
    auto o = apply();
    CAF_REQUIRE_EQUAL(to_string(o.kind), std::string{"retry"});
    CAF_CHECK_EQUAL(metrics->other_db_errors.load(), attempt);
    CAF_CHECK_GREATER(o.retry_after.count(), 0);
    CAF_CHECK_LESS_OR_EQUAL(o.retry_after.count(), cap.count());
    // Asked again before the backoff ended: no attempt, the time left.
    auto early = apply();
    CAF_CHECK_EQUAL(to_string(early.kind), std::string{"retry"});
    CAF_CHECK_EQUAL(metrics->other_db_errors.load(), attempt);
    CAF_CHECK_LESS_OR_EQUAL(early.retry_after.count(), o.retry_after.count());
    sched.clock().current_time += o.retry_after;
  }
}

CAF_TEST_FIXTURE_SCOPE_END()
