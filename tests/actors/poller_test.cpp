// Deterministic tests of the poller (CAF test coordinator): credits limit
// its reads, a full read is followed by another, with a listener a credit
// reads only what the last read may have left (or a due poll) and a burst
// of NOTIFYs makes one read, empty reads back off (idle backoff) or, in
// tick mode, only report idle, and a failed read waits for the error
// backoff even when credits arrive meanwhile. The database is
// replaced by a fake receive function.

#define CAF_SUITE actors.poller
#include "cmdbus/actors/worker/poller.hpp"

#include <caf/test/dsl.hpp>

#include "cmdbus/db/error.hpp"
#include "tests/actors/settings.hpp"

using namespace cmdbus;
using namespace cmdbus::actors;
using namespace std::chrono_literals;

namespace {

// The queue behind the fake receive.
struct fake_queue {
  /// Messages waiting.
  int available = 0;
  int64_t next_msg_id = 1;
  /// The quantity asked for by each read.
  std::vector<int> reads;
  /// How each read chose its messages.
  std::vector<db::read_options> hows;
  /// The command type of the messages (by default "T").
  std::function<std::string(int64_t)> type_of = [](int64_t) {
    return std::string{"T"};
  };
  /// Reads that fail (a lost connection) before reads succeed again.
  int fail_next = 0;

  db::receive_result receive(int, int qty, const db::read_options& how) {
    reads.push_back(qty);
    hows.push_back(how);
    if (fail_next > 0) {
      --fail_next;
      throw db::error{db::errc::connection, "", "connection lost"};
    }
    db::receive_result res;
    auto n = std::min(qty, available);
    // A per-type limit of the next message's type bounds the read (the
    // fake's messages are all of one type).
    for (auto& [type, limit] : how.type_limits)
      if (available > 0 && type == type_of(next_msg_id))
        n = std::min(n, limit);
    available -= n;
    for (int i = 0; i < n; ++i) {
      received_command rc;
      rc.cmd.domain = "d";
      rc.msg_id = next_msg_id++;
      rc.cmd.command_type = type_of(rc.msg_id);
      res.commands.push_back(std::move(rc));
    }
    res.read = n;
    return res;
  }
};

// What the poller sent to its supervisor.
struct parent_log {
  std::vector<size_t> runs;
  std::vector<int64_t> idles;
};

poller_parent_actor::behavior_type
parent_sink(poller_parent_actor::pointer, std::shared_ptr<parent_log> log) {
  return {
    [log](atom::run, const std::vector<received_command>& xs) {
      log->runs.push_back(xs.size());
    },
    [](atom::finish, const db::finished_command&) {},
    [log](atom::empty, int64_t seen) { log->idles.push_back(seen); },
  };
}

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<fake_queue> queue = std::make_shared<fake_queue>();
  std::shared_ptr<parent_log> got = std::make_shared<parent_log>();
  /// The configuration the poller gets when started.
  config::worker_config cfg;
  domain_settings settings = test::make_settings(cfg);
  poller_parent_actor parent;
  poller_actor aut;

  fixture() {
    cfg.concurrency = 2;
    cfg.prefetch = 0;
    cfg.poll_interval = 1000ms;
    cfg.use_notify = false;
    parent = sys.spawn(parent_sink, got);
    sched.run();
  }

  ~fixture() {
    if (aut)
      caf::anon_send_exit(aut, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(parent, caf::exit_reason::user_shutdown);
    sched.run();
  }

  // Spawns the poller; it reads once at start.
  void start() {
    settings.cfg = std::make_shared<const config::worker_config>(cfg);
    auto q = queue;
    aut = sys.spawn(
      poller, settings, parent,
      receive_fn{[q](int vt, int qty, const db::read_options& how) {
        return q->receive(vt, qty, how);
      }});
    sched.run();
  }

  poller_state& st() {
    return deref<poller_actor::stateful_base<poller_state>>(aut).state;
  }

  void credit(int64_t n) {
    self->send(aut, atom::credit::value, n);
    sched.run();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(poller_tests, fixture)

CAF_TEST(credits limit the reads) {
  queue->available = 5;
  start();
  // Two credits at start (concurrency 2, no prefetch): one read of 2, a
  // full read, then nothing until credits come back.
  CAF_CHECK_EQUAL(queue->reads, std::vector<int>{2});
  CAF_CHECK_EQUAL(got->runs, std::vector<size_t>{2});
  CAF_CHECK_EQUAL(st().credits, 0);
  credit(1);
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 1}));
  CAF_CHECK_EQUAL(got->runs, (std::vector<size_t>{2, 1}));
  // Credits that arrive together make one read.
  self->send(aut, atom::credit::value, int64_t{1});
  self->send(aut, atom::credit::value, int64_t{1});
  sched.run();
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 1, 2}));
  CAF_CHECK_EQUAL(got->runs, (std::vector<size_t>{2, 1, 2}));
  CAF_CHECK_EQUAL(queue->available, 0);
}

CAF_TEST(with a listener a credit reads only what the last read left) {
  queue->available = 1;
  start();
  // A partial read (1 of 2): the queue was empty after it.
  CAF_CHECK_EQUAL(queue->reads, std::vector<int>{2});
  // As with a listener (the fixture runs none: use_notify is off).
  st().notified = true;
  queue->available = 3;
  credit(1);
  // Nothing was left behind and new messages come with a NOTIFY: no read.
  CAF_CHECK_EQUAL(queue->reads, std::vector<int>{2});
  CAF_CHECK_EQUAL(st().credits, 2);
  self->send(aut, atom::wakeup::value);
  sched.run();
  // The NOTIFY's read is full: more may wait, so the next credit reads.
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 2}));
  credit(1);
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 2, 1}));
  CAF_CHECK_EQUAL(got->runs, (std::vector<size_t>{1, 2, 1}));
  // A read skipped for want of credits leaves messages behind too.
  queue->available = 1;
  self->send(aut, atom::wakeup::value);
  sched.run();
  CAF_CHECK_EQUAL(queue->reads.size(), 3u);
  credit(1);
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 2, 1, 1}));
  // That read was full: the next credit reads, finds the queue empty, and
  // the one after that does not read.
  credit(1);
  credit(1);
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 2, 1, 1, 1}));
  // A request to read again (0 credits) always reads.
  credit(0);
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 2, 1, 1, 1, 2}));
}

CAF_TEST(with a listener a credit reads once the poll is due) {
  start();
  st().notified = true;
  queue->available = 1;
  credit(1);
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  // Credits arriving without pause restart the poll timer (an idle
  // timeout), so the credit itself reads once the poll is due.
  CAF_REQUIRE(st().next_poll);
  sched.clock().current_time += *st().next_poll;
  credit(1);
  CAF_CHECK_EQUAL(queue->reads.size(), 2u);
  CAF_CHECK_EQUAL(got->runs, std::vector<size_t>{1});
}

CAF_TEST(a burst of listener wakeups makes one read) {
  queue->available = 1;
  start();
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  // What the listener thread does on each NOTIFY: five while the poller is
  // busy send one wakeup.
  int sent = 0;
  for (int i = 0; i < 5; ++i)
    if (st().wake->raise()) {
      caf::anon_send(aut, atom::wakeup::value);
      ++sent;
    }
  CAF_CHECK_EQUAL(sent, 1);
  sched.run();
  CAF_CHECK_EQUAL(queue->reads.size(), 2u);
  // Taken by that read: the next NOTIFY sends a wakeup again.
  CAF_CHECK(st().wake->raise());
}

CAF_TEST(empty reads back off up to the poll interval) {
  start();
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  CAF_CHECK_EQUAL(got->idles, std::vector<int64_t>{0});
  CAF_CHECK_EQUAL(st().empty_reads, 1);
  // A quarter of the poll interval after the first empty read, doubling
  // per empty read up to the poll interval; +/- 20 % jitter.
  auto check_delay = [&](int64_t nominal) {
    CAF_REQUIRE(st().next_poll);
    auto ms = st().next_poll->count();
    CAF_CHECK_GREATER_OR_EQUAL(ms, nominal * 8 / 10);
    CAF_CHECK_LESS_OR_EQUAL(ms, nominal * 12 / 10);
  };
  check_delay(250);
  for (int64_t nominal : {500, 1000, 1000}) {
    sched.trigger_timeout();
    sched.run();
    check_delay(nominal);
  }
  CAF_CHECK_EQUAL(queue->reads.size(), 4u);
  CAF_CHECK_EQUAL(st().empty_reads, 4);
  // A read that finds messages resets the backoff: a partial read waits
  // the poll interval.
  queue->available = 1;
  sched.trigger_timeout();
  sched.run();
  CAF_CHECK_EQUAL(got->runs, std::vector<size_t>{1});
  CAF_CHECK_EQUAL(st().empty_reads, 0);
  CAF_REQUIRE(st().next_poll);
  CAF_CHECK_EQUAL(st().next_poll->count(), 1000);
}

CAF_TEST(idle delays follow the curve) {
  std::mt19937_64 rng{3};
  for (int i = 0; i < 100; ++i) {
    auto first = idle_delay(1000ms, 1, rng).count();
    CAF_CHECK_GREATER_OR_EQUAL(first, 200);
    CAF_CHECK_LESS_OR_EQUAL(first, 300);
    auto later = idle_delay(1000ms, 9, rng).count();
    CAF_CHECK_GREATER_OR_EQUAL(later, 800);
    CAF_CHECK_LESS_OR_EQUAL(later, 1200);
  }
  // Never below a millisecond.
  CAF_CHECK_GREATER_OR_EQUAL(idle_delay(1ms, 1, rng).count(), 1);
}

CAF_TEST(tick mode reports idle and arms no timer) {
  settings.tick = true;
  start();
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  CAF_CHECK_EQUAL(got->idles, std::vector<int64_t>{0});
  CAF_CHECK(!st().next_poll);
  CAF_CHECK(!sched.trigger_timeout());
  // A credit of 0 (after a commit) reads once more; the idle report counts
  // the credit messages seen.
  queue->available = 1;
  credit(0);
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 2}));
  CAF_CHECK_EQUAL(got->runs, std::vector<size_t>{1});
  credit(1);
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 2, 2}));
  CAF_CHECK_EQUAL(got->idles, (std::vector<int64_t>{0, 2}));
}

CAF_TEST(configured idle backoff grows to its max and resets on work) {
  cfg.idle_backoff_min = 40ms;
  cfg.idle_backoff_max = 300ms;
  cfg.idle_jitter = 0.0;
  start();
  std::vector<int64_t> delays;
  for (int i = 0; i < 5; ++i) {
    CAF_REQUIRE(st().next_poll);
    delays.push_back(st().next_poll->count());
    sched.trigger_timeout();
    sched.run();
  }
  CAF_CHECK_EQUAL(delays, (std::vector<int64_t>{40, 80, 160, 300, 300}));
  // Work resets it: a partial read waits the poll interval, and the next
  // empty read starts again at the floor.
  queue->available = 1;
  sched.trigger_timeout();
  sched.run();
  CAF_CHECK_EQUAL(got->runs, std::vector<size_t>{1});
  CAF_CHECK_EQUAL(st().next_poll->count(), 1000);
  sched.trigger_timeout();
  sched.run();
  CAF_REQUIRE(st().next_poll);
  CAF_CHECK_EQUAL(st().next_poll->count(), 40);
}

CAF_TEST(configured idle jitter stays within its fraction) {
  config::worker_config c;
  c.idle_backoff_min = 100ms;
  c.idle_backoff_max = 1000ms;
  c.idle_jitter = 0.5;
  std::mt19937_64 rng{5};
  for (int i = 0; i < 100; ++i) {
    auto first = idle_delay(c, 1, rng).count();
    CAF_CHECK_GREATER_OR_EQUAL(first, 50);
    CAF_CHECK_LESS_OR_EQUAL(first, 150);
    auto later = idle_delay(c, 20, rng).count();
    CAF_CHECK_GREATER_OR_EQUAL(later, 500);
    CAF_CHECK_LESS_OR_EQUAL(later, 1500);
  }
}

CAF_TEST(a busy delay paces reads after a full read) {
  cfg.busy_delay = 50ms;
  queue->available = 10;
  start();
  // A full read of 2: the next read waits the busy delay instead of
  // following at once.
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2}));
  CAF_REQUIRE(st().next_poll);
  CAF_CHECK_EQUAL(st().next_poll->count(), 50);
}

CAF_TEST(a tick poller reads no more than its item limit) {
  settings.tick = true;
  settings.tick_limit.max_items = 3;
  settings.tick_cut = std::make_shared<std::atomic<bool>>(false);
  queue->available = 10;
  start();
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2}));
  credit(2);
  // One left of the limit: a read of 1, then the limit reports idle
  // without reading and marks the run cut.
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 1}));
  CAF_CHECK_EQUAL(st().claimed, 3);
  CAF_CHECK(settings.tick_cut->load());
  CAF_CHECK_EQUAL(got->idles.size(), 1u);
  credit(3);
  CAF_CHECK_EQUAL(queue->reads.size(), 2u);
  CAF_CHECK_EQUAL(queue->available, 7);
}

CAF_TEST(a tick poller takes nothing after its deadline) {
  settings.tick = true;
  settings.tick_limit.deadline = sched.clock().current_time;
  settings.tick_cut = std::make_shared<std::atomic<bool>>(false);
  queue->available = 10;
  start();
  CAF_CHECK(queue->reads.empty());
  CAF_CHECK_EQUAL(got->idles.size(), 1u);
  CAF_CHECK(settings.tick_cut->load());
}

CAF_TEST(a tick poller reads its shard) {
  settings.tick = true;
  settings.shard_index = 1;
  settings.shard_count = 3;
  queue->available = 1;
  start();
  CAF_REQUIRE_EQUAL(queue->hows.size(), 1u);
  CAF_CHECK_EQUAL(queue->hows[0].shard_index, 1);
  CAF_CHECK_EQUAL(queue->hows[0].shard_count, 3);
  CAF_CHECK(queue->hows[0].chooses());
}

CAF_TEST(a failed read waits for the error backoff) {
  queue->fail_next = 1;
  start();
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  CAF_CHECK_EQUAL(settings.metrics->db_errors(db_actor::poller), 1);
  // The first backoff: 100 ms, drawn from [50, 100] ms.
  CAF_REQUIRE(st().next_poll);
  CAF_CHECK_GREATER_OR_EQUAL(st().next_poll->count(), 50);
  CAF_CHECK_LESS_OR_EQUAL(st().next_poll->count(), 100);
  // A credit during the backoff does not read before it ended.
  credit(1);
  CAF_CHECK_EQUAL(queue->reads.size(), 1u);
  queue->available = 3;
  sched.trigger_timeout();
  sched.run();
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 3}));
  CAF_CHECK_EQUAL(got->runs, std::vector<size_t>{3});
}

CAF_TEST(a capped type is read only while its cap has room) {
  // Type "S" capped at 1 with two handler slots: the first read asks for at
  // most one S and gets it; with one credit left the poller reads again
  // only when the supervisor gives the cap's slot back.
  cfg.scheduling["d"].type_concurrency["S"] = 1;
  queue->type_of = [](int64_t) { return std::string{"S"}; };
  queue->available = 5;
  start();
  CAF_REQUIRE_EQUAL(queue->hows.size(), 1u);
  CAF_CHECK_EQUAL(queue->hows[0].type_limits,
                  (std::vector<std::pair<std::string, int>>{{"S", 1}}));
  CAF_CHECK_EQUAL(got->runs, std::vector<size_t>{1});
  CAF_CHECK_EQUAL(st().type_credits["S"], 0);
  CAF_CHECK_EQUAL(st().credits, 1);
  // A read now (e.g. a NOTIFY) claims no S: its limit is 0.
  self->send(aut, atom::wakeup::value);
  sched.run();
  CAF_REQUIRE_EQUAL(queue->hows.size(), 2u);
  CAF_CHECK_EQUAL(queue->hows[1].type_limits,
                  (std::vector<std::pair<std::string, int>>{{"S", 0}}));
  CAF_CHECK_EQUAL(queue->available, 4);
  // The S finished: its slot and its credit come back; the next read
  // takes one S again.
  self->send(aut, atom::credit::value, std::string{"S"}, int64_t{1});
  self->send(aut, atom::credit::value, int64_t{1});
  sched.run();
  CAF_CHECK_EQUAL(queue->hows.back().type_limits,
                  (std::vector<std::pair<std::string, int>>{{"S", 1}}));
  CAF_CHECK_EQUAL(got->runs, (std::vector<size_t>{1, 1}));
  CAF_CHECK_EQUAL(queue->available, 3);
  CAF_CHECK_EQUAL(st().credits_seen, 2);
}

CAF_TEST(with priorities one claim in fifo_every is taken oldest first) {
  cfg.scheduling["d"].priorities = true;
  cfg.scheduling["d"].fifo_every = 3;
  queue->available = 100;
  start();
  credit(1);
  credit(2);
  credit(1);
  credit(2);
  credit(2);
  // Reads of 2, 1, 2, 1, 2, 2 (claims 2, 3, 5, 6, 8, 10): the oldest-first
  // share keeps floor(claims / 3) of them oldest-first.
  CAF_CHECK_EQUAL(queue->reads, (std::vector<int>{2, 1, 2, 1, 2, 2}));
  std::vector<int> oldest;
  for (auto& how : queue->hows) {
    CAF_CHECK(how.priority);
    oldest.push_back(how.oldest);
  }
  CAF_CHECK_EQUAL(oldest, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  CAF_CHECK_EQUAL(st().claimed, 10);
  CAF_CHECK_EQUAL(st().claimed_oldest, 3);
}

CAF_TEST(without priorities or caps the read chooses like pgmq.read) {
  queue->available = 3;
  start();
  CAF_REQUIRE_EQUAL(queue->hows.size(), 1u);
  CAF_CHECK(!queue->hows[0].chooses());
}

CAF_TEST_FIXTURE_SCOPE_END()
