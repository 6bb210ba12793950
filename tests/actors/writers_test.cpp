// Deterministic tests of the side-effect writers (completion and retry
// scheduler) on CAF's test coordinator: group commit of what queued in the
// mailbox, the flush interval, explicit flushes (drain), the flush on exit,
// and keeping the buffer across a failed write. The database is replaced by
// recording fakes through spawn_completion_writer / spawn_retry_writer.

#define CAF_SUITE actors.writers
#include "cmdbus/actors/worker/completion.hpp"
#include "cmdbus/actors/worker/retry_scheduler.hpp"
#include "tests/actors/settings.hpp"

#include <caf/test/dsl.hpp>

#include <algorithm>
#include <stdexcept>
#include <utility>

using namespace cmdbus;
using namespace cmdbus::actors;

namespace {

// Takes what the writers report, adding up the committed counts.
writer_parent_actor::behavior_type
parent_sink(writer_parent_actor::pointer,
            std::shared_ptr<int64_t> done_total) {
  return {
    [done_total](atom::committed, int64_t n) { *done_total += n; },
    [](atom::batches, const std::string&, const std::vector<uuid>&) {},
    [](atom::unavailable) {},
  };
}

received_command make_rc(int64_t msg_id) {
  received_command rc;
  rc.cmd.domain = "d";
  rc.cmd.command_type = "T";
  rc.cmd.command_id = uuid::random();
  rc.msg_id = msg_id;
  rc.attempt = 1;
  rc.max_attempts = 3;
  return rc;
}

db::finished_command finished(int64_t msg_id) {
  db::finished_command x;
  x.rc = make_rc(msg_id);
  x.out.kind = outcome_kind::success;
  return x;
}

db::retry_command retried(int64_t msg_id) {
  db::retry_command x;
  x.rc = make_rc(msg_id);
  x.out.kind = outcome_kind::transient;
  x.backoff_seconds = 5;
  return x;
}

// What a fake write saw: the msg_ids of each call.
struct writes {
  std::vector<std::vector<int64_t>> calls;
  /// Calls that throw before succeeding (a database failure).
  int fail_next = 0;
  /// Whether those failures are a lost connection (else a refused
  /// statement).
  bool unavailable = false;
  std::vector<uuid> completed_batches;
  /// msg_ids the next write reports as stale.
  std::vector<int64_t> stale;
  /// msg_ids the next write reports as written by an earlier attempt.
  std::vector<int64_t> already;
  /// The states the next write reports, item by item (when not empty:
  /// instead of `stale` and `already`).
  std::vector<db::write_state> states;
  /// A write holding a successful outcome of this msg_id is refused for its
  /// content (-1: none).
  int64_t poison = -1;

  template <class Item>
  void record(const std::vector<Item>& xs) {
    std::vector<int64_t> ids;
    for (auto& x : xs)
      ids.push_back(x.rc.msg_id);
    calls.push_back(std::move(ids));
    for (auto& x : xs)
      if (x.rc.msg_id == poison && x.out.kind != outcome_kind::permanent)
        throw db::error{db::errc::data_exception, "22021",
                        "invalid byte sequence"};
    if (fail_next > 0) {
      --fail_next;
      if (unavailable)
        throw db::error{db::errc::connection, "", "connection lost"};
      throw std::runtime_error("database refused the statement");
    }
  }

  /// What the next write reports for `xs` (consumed).
  template <class Item>
  std::pair<std::vector<db::write_state>, std::vector<int64_t>>
  report(const std::vector<Item>& xs) {
    auto given = std::exchange(states, {});
    auto s = std::exchange(stale, {});
    auto a = std::exchange(already, {});
    std::vector<db::write_state> out;
    std::vector<int64_t> stale_ids;
    auto has = [](const std::vector<int64_t>& ids, int64_t id) {
      return std::find(ids.begin(), ids.end(), id) != ids.end();
    };
    for (size_t i = 0; i < xs.size(); ++i) {
      auto id = xs[i].rc.msg_id;
      auto state = i < given.size() ? given[i]
                   : has(s, id)     ? db::write_state::stale
                   : has(a, id)     ? db::write_state::already_written
                                    : db::write_state::written;
      if (state == db::write_state::stale)
        stale_ids.push_back(id);
      out.push_back(state);
    }
    return {std::move(out), std::move(stale_ids)};
  }
};

struct fixture : test_coordinator_fixture<> {
  std::shared_ptr<writes> log = std::make_shared<writes>();
  std::shared_ptr<int64_t> done_total = std::make_shared<int64_t>(0);
  /// The configuration the writer gets when spawned.
  config::worker_config cfg;
  domain_settings settings = test::make_settings(cfg);
  writer_parent_actor parent;
  /// The writer under test (completion or retry scheduler).
  caf::actor writer;
  /// The outcomes the domain's metrics had counted at the last recount().
  outcome_totals base;

  fixture() {
    cfg.flush_interval = std::chrono::milliseconds{2};
    parent = sys.spawn(parent_sink, done_total);
    sched.run();
  }

  ~fixture() {
    if (writer)
      caf::anon_send_exit(writer, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(parent, caf::exit_reason::user_shutdown);
    sched.run();
  }

  void spawn_completion() {
    settings.cfg = std::make_shared<const config::worker_config>(cfg);
    auto l = log;
    writer = caf::actor_cast<caf::actor>(spawn_completion_writer(
      sys, settings, parent,
      [l](const std::vector<db::finished_command>& xs) {
        l->record(xs);
        auto [states, stale] = l->report(xs);
        return db::finish_result{l->completed_batches, std::move(states),
                                 std::move(stale)};
      },
      false));
    sched.run();
  }

  // One write of two items, so that the writer sees load (it just wrote
  // more than one item) and further items wait for the flush interval;
  // clears the log.
  template <class Atom, class Item>
  void prime(Atom atom, Item item) {
    self->send(writer, atom, item);
    self->send(writer, atom, std::move(item));
    sched.run();
    CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
    log->calls.clear();
    *done_total = 0;
  }

  // Counts the outcomes from now on.
  void recount() {
    base = settings.metrics->totals();
  }

  // The outcomes counted since the last recount().
  outcome_totals counted() const {
    auto t = settings.metrics->totals();
    return {t.completed - base.completed, t.failed - base.failed,
            t.retried - base.retried, t.moved_to_tsq - base.moved_to_tsq};
  }

  void spawn_retry() {
    settings.cfg = std::make_shared<const config::worker_config>(cfg);
    auto l = log;
    writer = caf::actor_cast<caf::actor>(spawn_retry_writer(
      sys, settings, parent,
      [l](const std::vector<db::retry_command>& xs) {
        l->record(xs);
        auto [states, stale] = l->report(xs);
        return db::reschedule_result{std::move(states), std::move(stale)};
      },
      [](const std::vector<int64_t>& ids, int, bool) {
        return static_cast<int>(ids.size());
      },
      false));
    sched.run();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(writer_tests, fixture)

CAF_TEST(items queued in the mailbox are written as one transaction) {
  cfg.flush_interval = std::chrono::milliseconds{0};
  spawn_completion();
  for (int64_t i = 1; i <= 5; ++i)
    self->send(writer, atom::finish::value, finished(i));
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  CAF_CHECK_EQUAL(log->calls[0], (std::vector<int64_t>{1, 2, 3, 4, 5}));
  CAF_CHECK_EQUAL(counted().completed, 5);
}

CAF_TEST(completed batches and then the committed count go to the parent) {
  cfg.flush_interval = std::chrono::milliseconds{0};
  auto batch = uuid::random();
  log->completed_batches = {batch};
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  self->send(writer, atom::finish::value, finished(2));
  expect((atom::finish, db::finished_command), from(self).to(writer));
  expect((atom::finish, db::finished_command), from(self).to(writer));
  expect((atom::batches, std::string, std::vector<uuid>),
         from(writer).to(parent).with(_, "d", std::vector<uuid>{batch}));
  expect((atom::committed, int64_t), from(writer).to(parent).with(_, 2));
}

CAF_TEST(stale outcomes count as done but not as completed) {
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->stale = {2};
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  self->send(writer, atom::finish::value, finished(2));
  sched.run();
  CAF_CHECK_EQUAL(*done_total, 2);
  CAF_CHECK_EQUAL(counted().completed, 1);
  CAF_CHECK_EQUAL(settings.metrics->stale.load(), 1);
}

CAF_TEST(outcomes written by an earlier attempt count as completed) {
  // A write that committed although its answer was lost is written again:
  // what the database already holds is the worker's own, not stale.
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->already = {1};
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  self->send(writer, atom::finish::value, finished(2));
  sched.run();
  CAF_CHECK_EQUAL(*done_total, 2);
  CAF_CHECK_EQUAL(counted().completed, 2);
  CAF_CHECK_EQUAL(settings.metrics->stale.load(), 0);
}

CAF_TEST(two deliveries of one message are counted item by item) {
  // The database forgot the first claim: its delivery is stale, the
  // second one (same msg_id) is written.
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->states = {db::write_state::stale, db::write_state::written};
  spawn_completion();
  self->send(writer, atom::finish::value, finished(7));
  self->send(writer, atom::finish::value, finished(7));
  sched.run();
  CAF_CHECK_EQUAL(*done_total, 2);
  CAF_CHECK_EQUAL(counted().completed, 1);
  CAF_CHECK_EQUAL(settings.metrics->stale.load(), 1);
}

CAF_TEST(retries written by an earlier attempt count as retried) {
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->already = {1};
  log->stale = {3};
  spawn_retry();
  self->send(writer, atom::retry::value, retried(1));
  self->send(writer, atom::retry::value, retried(2));
  self->send(writer, atom::retry::value, retried(3));
  sched.run();
  CAF_CHECK_EQUAL(*done_total, 3);
  CAF_CHECK_EQUAL(counted().retried, 2);
  CAF_CHECK_EQUAL(settings.metrics->stale.load(), 1);
}

CAF_TEST(under light load a single item is written at once) {
  cfg.flush_interval = std::chrono::hours{1};
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  CAF_CHECK_EQUAL(log->calls[0], (std::vector<int64_t>{1}));
}

CAF_TEST(an item right after a write waits for the flush interval) {
  cfg.flush_interval = std::chrono::hours{1};
  spawn_completion();
  prime(atom::finish::value, finished(0));
  self->send(writer, atom::finish::value, finished(1));
  sched.run();
  CAF_CHECK(log->calls.empty());
  // The behavior's timeout writes it once the mailbox stayed quiet.
  sched.trigger_timeouts();
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  CAF_CHECK_EQUAL(log->calls[0], (std::vector<int64_t>{1}));
}

CAF_TEST(an idle writer arms no timeout) {
  // An empty buffer needs no timer: an idle writer sleeps until a message
  // arrives instead of waking up every flush interval.
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  // Fire whatever the clock still holds (timeouts of earlier behaviors).
  sched.trigger_timeouts();
  sched.run();
  CAF_CHECK_EQUAL(sched.trigger_timeouts(), 0u);
  CAF_CHECK_EQUAL(log->calls.size(), 1u);
}

CAF_TEST(a flush request writes at once) {
  cfg.flush_interval = std::chrono::hours{1};
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  self->send(writer, atom::flush::value);
  expect((atom::finish, db::finished_command), from(self).to(writer));
  CAF_CHECK(log->calls.empty());
  expect((atom::flush), from(self).to(writer));
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  expect((atom::committed, int64_t), from(writer).to(parent).with(_, 1));
}

CAF_TEST(the completion writer writes its buffer on exit) {
  cfg.flush_interval = std::chrono::hours{1};
  spawn_completion();
  prime(atom::finish::value, finished(0));
  recount();
  for (int64_t i = 1; i <= 3; ++i)
    self->send(writer, atom::finish::value, finished(i));
  sched.run();
  CAF_CHECK(log->calls.empty());
  caf::anon_send_exit(writer, caf::exit_reason::user_shutdown);
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  CAF_CHECK_EQUAL(log->calls[0], (std::vector<int64_t>{1, 2, 3}));
  CAF_CHECK_EQUAL(counted().completed, 3);
  CAF_CHECK_EQUAL(*done_total, 3);
  writer = caf::actor{};
}

CAF_TEST(the retry scheduler writes its buffer on exit) {
  cfg.flush_interval = std::chrono::hours{1};
  spawn_retry();
  prime(atom::retry::value, retried(0));
  recount();
  self->send(writer, atom::retry::value, retried(7));
  self->send(writer, atom::retry::value, retried(8));
  sched.run();
  CAF_CHECK(log->calls.empty());
  caf::anon_send_exit(writer, caf::exit_reason::user_shutdown);
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  CAF_CHECK_EQUAL(log->calls[0], (std::vector<int64_t>{7, 8}));
  CAF_CHECK_EQUAL(counted().retried, 2);
  CAF_CHECK_EQUAL(*done_total, 2);
  writer = caf::actor{};
}

CAF_TEST(a failed write keeps the buffer and retries it with new items) {
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->fail_next = 1;
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  CAF_CHECK_EQUAL(settings.metrics->all_db_errors(), 1);
  CAF_CHECK_EQUAL(counted().completed, 0);
  // While backing off, new items are buffered, not written.
  self->send(writer, atom::finish::value, finished(2));
  sched.run();
  CAF_CHECK_EQUAL(log->calls.size(), 1u);
  // The backoff's timeout writes everything, in order, once.
  sched.trigger_timeouts();
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 2u);
  CAF_CHECK_EQUAL(log->calls[1], (std::vector<int64_t>{1, 2}));
  CAF_CHECK_EQUAL(counted().completed, 2);
}

CAF_TEST(a busy writer retries once the backoff passed) {
  // Items keep arriving during the backoff, so the behavior's idle timeout
  // never fires: the writer checks the backoff's end on every message.
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->fail_next = 1;
  log->unavailable = true;
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  expect((atom::finish, db::finished_command), from(self).to(writer));
  // The failure is reported as an unavailable database.
  expect((atom::unavailable), from(writer).to(parent));
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  // The first backoff is 50..100 ms. An item every 20 ms restarts the idle
  // timeout (due a backoff after the last item) long before it could fire;
  // still, everything is written once the backoff passed.
  for (int64_t i = 2; i <= 7; ++i) {
    sched.advance_time(std::chrono::milliseconds{20});
    self->send(writer, atom::finish::value, finished(i));
    sched.run();
    if (i == 2)
      CAF_CHECK_EQUAL(log->calls.size(), 1u);
  }
  std::vector<int64_t> written;
  for (size_t i = 1; i < log->calls.size(); ++i)
    written.insert(written.end(), log->calls[i].begin(), log->calls[i].end());
  CAF_CHECK_EQUAL(written, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  CAF_CHECK_EQUAL(counted().completed, 7);
}

CAF_TEST(an outcome refused for its content goes to the TSQ alone) {
  // One bad item must not hold back the others for ever: the write is
  // split, and the refused outcome becomes a permanent failure.
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->poison = 2;
  spawn_completion();
  prime(atom::finish::value, finished(0));
  recount();
  for (int64_t i = 1; i <= 3; ++i)
    self->send(writer, atom::finish::value, finished(i));
  sched.run();
  CAF_CHECK_EQUAL(log->calls,
                  (std::vector<std::vector<int64_t>>{
                    {1, 2, 3}, {1}, {2}, {2}, {3}}));
  CAF_CHECK_EQUAL(counted().completed, 2);
  CAF_CHECK_EQUAL(counted().moved_to_tsq, 1);
  CAF_CHECK_EQUAL(*done_total, 3);
  CAF_CHECK_EQUAL(settings.metrics->all_db_errors(), 0);
}

CAF_TEST(a retry refused for its content is dropped alone) {
  // Its message becomes visible again when its visibility timeout ends.
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->poison = 8;
  spawn_retry();
  prime(atom::retry::value, retried(0));
  recount();
  self->send(writer, atom::retry::value, retried(7));
  self->send(writer, atom::retry::value, retried(8));
  sched.run();
  CAF_CHECK_EQUAL(log->calls, (std::vector<std::vector<int64_t>>{
                                {7, 8}, {7}, {8}}));
  CAF_CHECK_EQUAL(counted().retried, 1);
  CAF_CHECK_EQUAL(*done_total, 2);
}

CAF_TEST(a refused write is not reported as an unavailable database) {
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->fail_next = 1;
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  expect((atom::finish, db::finished_command), from(self).to(writer));
  disallow((atom::unavailable), from(writer).to(parent));
  CAF_CHECK_EQUAL(settings.metrics->all_db_errors(), 1);
}

CAF_TEST(a writer stopping while the database fails does not try again) {
  // Writing on the way out would wait for a connection attempt; the
  // messages reappear after their visibility timeout instead.
  cfg.flush_interval = std::chrono::milliseconds{0};
  log->fail_next = 1;
  log->unavailable = true;
  spawn_completion();
  self->send(writer, atom::finish::value, finished(1));
  sched.run();
  CAF_REQUIRE_EQUAL(log->calls.size(), 1u);
  caf::anon_send_exit(writer, caf::exit_reason::user_shutdown);
  sched.run();
  CAF_CHECK_EQUAL(log->calls.size(), 1u);
  CAF_CHECK_EQUAL(*done_total, 0);
  writer = caf::actor{};
}

CAF_TEST(a write failing on exit reports nothing as done) {
  // The messages reappear after their visibility timeout: nothing is lost,
  // and nothing is claimed to be committed.
  cfg.flush_interval = std::chrono::hours{1};
  spawn_completion();
  prime(atom::finish::value, finished(0));
  recount();
  log->fail_next = 1;
  self->send(writer, atom::finish::value, finished(1));
  sched.run();
  CAF_CHECK(log->calls.empty());
  caf::anon_send_exit(writer, caf::exit_reason::user_shutdown);
  sched.run();
  CAF_CHECK_EQUAL(log->calls.size(), 1u);
  CAF_CHECK_EQUAL(counted().completed, 0);
  CAF_CHECK_EQUAL(*done_total, 0);
  writer = caf::actor{};
}

CAF_TEST(the retry scheduler answers lease extensions) {
  spawn_retry();
  self->send(writer, atom::extend::value, std::vector<int64_t>{1, 2, 3}, 30,
             true);
  expect((atom::extend, std::vector<int64_t>, int, bool),
         from(self).to(writer).with(_, _, 30, true));
  expect((int), from(writer).to(self).with(3));
}

CAF_TEST_FIXTURE_SCOPE_END()
