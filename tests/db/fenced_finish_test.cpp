// Fenced side effects (sql/commandbus/V006, in the form of V007 that the
// worker calls): an outcome is written only while its delivery still owns
// its message. A delivery whose message was read again since (its
// visibility timeout expired, e.g. during an outage) or is gone writes
// nothing: no status change, no audit row, no reply, the message left
// alone, and the msg_id reported as stale. (A claim the database forgot:
// tests/db/lost_claim_test.cpp.)

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmdbus/db/worker_store.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

/// A command of a fresh domain, sent with a reply queue and read twice:
/// the first delivery is stale, the second owns the message.
struct twice_read {
  std::string domain;
  send_result sent;
  received_command first;
  received_command second;
};

twice_read read_twice(bus_env& e) {
  twice_read out;
  out.domain = test::unique_name("ff");
  auto req = make_req(out.domain, "Ok");
  req.reply_to = out.domain + "__replies";
  out.sent = e.bus.send(req);
  db::worker_store store{e.conn, out.domain};
  // A visibility timeout of 0: visible again at once.
  auto a = store.receive(0, 1);
  auto b = store.receive(30, 1);
  if (a.commands.size() != 1 || b.commands.size() != 1)
    throw std::runtime_error("expected the command twice");
  out.first = a.commands[0];
  out.second = b.commands[0];
  return out;
}

db::finished_command finished(const received_command& rc, outcome_kind kind) {
  db::finished_command x;
  x.rc = rc;
  x.out.kind = kind;
  if (kind != outcome_kind::success) {
    x.out.error_code = "E";
    x.out.error_message = "failed";
  }
  return x;
}

int64_t replies(db::connection& c, const std::string& domain) {
  return queue_rows(c, domain + "__replies");
}

} // namespace

TEST(FencedFinish, OnlyTheDeliveryOwningTheMessageCompletes) {
  bus_env e;
  auto t = read_twice(e);
  ASSERT_EQ(t.first.msg_id, t.second.msg_id);
  ASSERT_EQ(t.first.attempt, 1);
  ASSERT_EQ(t.second.attempt, 2);
  db::worker_store store{e.conn, t.domain};
  auto stale = store.finish({finished(t.first, outcome_kind::success)});
  EXPECT_EQ(stale.stale, (std::vector<int64_t>{t.first.msg_id}));
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"IN_PROGRESS"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(t.domain)), 1);
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "COMPLETED"), 0);
  auto owned = store.finish({finished(t.second, outcome_kind::success)});
  EXPECT_TRUE(owned.stale.empty());
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"COMPLETED"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(t.domain)), 0);
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "COMPLETED"), 1);
  EXPECT_EQ(replies(e.conn, t.domain), 1);
  // Written once: the same outcome again (a write repeated after its
  // answer was lost) is reported as written already, not as stale, and
  // writes nothing.
  auto again = store.finish({finished(t.second, outcome_kind::success)});
  EXPECT_TRUE(again.stale.empty());
  EXPECT_EQ(again.states,
            (std::vector<db::write_state>{db::write_state::already_written}));
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "COMPLETED"), 1);
  EXPECT_EQ(replies(e.conn, t.domain), 1);
}

TEST(FencedFinish, StaleFailuresAndRetriesWriteNothing) {
  bus_env e;
  for (auto kind : {outcome_kind::permanent, outcome_kind::business_rule}) {
    auto t = read_twice(e);
    db::worker_store store{e.conn, t.domain};
    auto res = store.finish({finished(t.first, kind)});
    EXPECT_EQ(res.stale, (std::vector<int64_t>{t.first.msg_id}));
    EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
              opt_str{"IN_PROGRESS"});
    EXPECT_EQ(archive_rows(e.conn, queue_of(t.domain)), 0);
    EXPECT_EQ(replies(e.conn, t.domain), 0);
  }
  auto t = read_twice(e);
  db::worker_store store{e.conn, t.domain};
  db::retry_command retry;
  retry.rc = t.first;
  retry.out = finished(t.first, outcome_kind::transient).out;
  retry.backoff_seconds = 600;
  EXPECT_EQ(store.reschedule({retry}).stale,
            (std::vector<int64_t>{t.first.msg_id}));
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "FAILED"), 0);
  EXPECT_EQ(column(e.conn, t.domain, t.sent.command_id, "last_error_code"),
            std::nullopt);
  // The owner's retry is written.
  retry.rc = t.second;
  EXPECT_TRUE(store.reschedule({retry}).stale.empty());
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "FAILED"), 1);
  EXPECT_TRUE(vt_beyond(e.conn, queue_of(t.domain), t.second.msg_id,
                        "500 seconds"));
}

TEST(FencedFinish, ABatchWritesItsOwnedPartOnly) {
  bus_env e;
  auto t = read_twice(e);
  // A second command of the same domain, read once: owned.
  auto other = e.bus.send(make_req(t.domain, "Ok"));
  db::worker_store store{e.conn, t.domain};
  auto got = store.receive(30, 1);
  ASSERT_EQ(got.commands.size(), 1u);
  auto res = store.finish({finished(t.first, outcome_kind::success),
                           finished(got.commands[0], outcome_kind::permanent),
                           finished(t.second, outcome_kind::business_rule)});
  EXPECT_EQ(res.stale, (std::vector<int64_t>{t.first.msg_id}));
  EXPECT_EQ(status_of(e.conn, t.domain, other.command_id),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"FAILED"});
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "COMPLETED"), 0);
}
