// Deferred claims (sql/commandbus/V016, docs/worker.md "Deferred claims"):
// a read leaves the commands that qualify unclaimed; a success claims and
// completes with the rows of a claim and a completion; anything else is
// claimed first; the read itself fences the delivery (read_ct and vt), and
// a read lost before its claim still counts as an attempt.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmdbus/db/worker_store.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

db::read_options deferring() {
  db::read_options how;
  how.defer_claims = true;
  return how;
}

/// One command of a fresh domain with a reply queue, read once deferred.
struct deferred_read {
  std::string domain;
  send_result sent;
  received_command rc;
};

deferred_read read_one(bus_env& e, int vt_seconds = 30) {
  deferred_read out;
  out.domain = test::unique_name("dc");
  auto req = make_req(out.domain, "Ok");
  req.reply_to = out.domain + "__replies";
  out.sent = e.bus.send(req);
  db::worker_store store{e.conn, out.domain};
  auto r = store.receive(vt_seconds, 10, deferring());
  if (r.commands.size() != 1)
    throw std::runtime_error("expected one command");
  out.rc = r.commands[0];
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

} // namespace

TEST(DeferredClaim, ASuccessWritesTheRowsOfAClaimAndACompletion) {
  bus_env e;
  auto t = read_one(e);
  ASSERT_TRUE(t.rc.deferred);
  EXPECT_EQ(t.rc.attempt, 1);
  EXPECT_EQ(t.rc.seen_attempts, 0);
  EXPECT_EQ(t.rc.read_ct, 1);
  // Nothing is written by the read but the message's lease.
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"PENDING"});
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "RECEIVED"), 0);

  db::worker_store store{e.conn, t.domain};
  auto res = store.finish({finished(t.rc, outcome_kind::success)});
  EXPECT_EQ(res.states,
            (std::vector<db::write_state>{db::write_state::written}));
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"COMPLETED"});
  EXPECT_EQ(attempts_of(e.conn, t.domain, t.sent.command_id), 1);
  EXPECT_EQ(events(e.conn, t.domain, t.sent.command_id),
            (strings{"SENT", "RECEIVED", "COMPLETED"}));
  EXPECT_EQ(audit_detail(e.conn, t.domain, t.sent.command_id, "RECEIVED",
                         "{claim}"),
            opt_str{t.rc.claim.to_string()});
  EXPECT_EQ(audit_detail(e.conn, t.domain, t.sent.command_id, "RECEIVED",
                         "{attempt}"),
            opt_str{"1"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(t.domain)), 0);
  EXPECT_EQ(queue_rows(e.conn, t.domain + "__replies"), 1);

  // The same write again (its answer lost): written already, nothing new.
  auto again = store.finish({finished(t.rc, outcome_kind::success)});
  EXPECT_EQ(again.states,
            (std::vector<db::write_state>{db::write_state::already_written}));
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "COMPLETED"), 1);
  EXPECT_EQ(queue_rows(e.conn, t.domain + "__replies"), 1);
}

TEST(DeferredClaim, AReadLostBeforeItsClaimCountsAndItsDeliveryIsStale) {
  bus_env e;
  // A visibility timeout of 0: visible again at once, as after a crash of
  // the worker that read it.
  auto t = read_one(e, 0);
  db::worker_store store{e.conn, t.domain};
  auto second = store.receive(30, 10, deferring());
  ASSERT_EQ(second.commands.size(), 1u);
  auto& rc2 = second.commands[0];
  ASSERT_TRUE(rc2.deferred);
  EXPECT_EQ(rc2.read_ct, 2);
  EXPECT_EQ(rc2.attempt, 2); // the lost read counts
  EXPECT_EQ(rc2.seen_attempts, 0);

  auto stale = store.finish({finished(t.rc, outcome_kind::success)});
  EXPECT_EQ(stale.stale, (std::vector<int64_t>{t.rc.msg_id}));
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"PENDING"});
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "RECEIVED"), 0);

  auto owned = store.finish({finished(rc2, outcome_kind::success)});
  EXPECT_TRUE(owned.stale.empty());
  EXPECT_EQ(attempts_of(e.conn, t.domain, t.sent.command_id), 2);
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "COMPLETED"), 1);
  // Both deliveries in one call: only the owner writes.
  EXPECT_EQ(queue_rows(e.conn, t.domain + "__replies"), 1);
}

TEST(DeferredClaim, FailuresAreClaimedInTheSameTransaction) {
  bus_env e;
  auto t = read_one(e);
  db::worker_store store{e.conn, t.domain};
  db::retry_command retry;
  retry.rc = t.rc;
  retry.out = finished(t.rc, outcome_kind::transient).out;
  retry.backoff_seconds = 0;
  auto r = store.reschedule({retry});
  EXPECT_EQ(r.states,
            (std::vector<db::write_state>{db::write_state::written}));
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"IN_PROGRESS"});
  EXPECT_EQ(events(e.conn, t.domain, t.sent.command_id),
            (strings{"SENT", "RECEIVED", "FAILED"}));
  // Written once, also when repeated.
  EXPECT_EQ(store.reschedule({retry}).states,
            (std::vector<db::write_state>{db::write_state::already_written}));

  // The retry is claimed at its read (the command is IN_PROGRESS), and its
  // permanent failure goes to the troubleshooting queue as usual.
  auto next = store.receive(30, 10, deferring());
  ASSERT_EQ(next.commands.size(), 1u);
  EXPECT_FALSE(next.commands[0].deferred);
  EXPECT_EQ(next.commands[0].attempt, 2);
  store.finish({finished(next.commands[0], outcome_kind::permanent)});
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});

  // A business-rule failure of a deferred delivery: claimed, then FAILED
  // with its reply.
  auto b = read_one(e);
  db::worker_store bstore{e.conn, b.domain};
  auto res = bstore.finish({finished(b.rc, outcome_kind::business_rule)});
  EXPECT_EQ(res.states,
            (std::vector<db::write_state>{db::write_state::written}));
  EXPECT_EQ(status_of(e.conn, b.domain, b.sent.command_id), opt_str{"FAILED"});
  EXPECT_EQ(events(e.conn, b.domain, b.sent.command_id),
            (strings{"SENT", "RECEIVED", "BUSINESS_RULE_FAILED"}));
  EXPECT_EQ(queue_rows(e.conn, b.domain + "__replies"), 1);
}

TEST(DeferredClaim, TheHeartbeatClaimKeepsTheDeliveryItsOwn) {
  bus_env e;
  auto t = read_one(e);
  db::worker_store store{e.conn, t.domain};
  EXPECT_EQ(store.claim_deferred({t.rc}),
            (std::vector<int64_t>{t.rc.msg_id}));
  EXPECT_EQ(status_of(e.conn, t.domain, t.sent.command_id),
            opt_str{"IN_PROGRESS"});
  EXPECT_EQ(attempts_of(e.conn, t.domain, t.sent.command_id), 1);
  // Claimed once: a second claim (its answer lost) claims nothing.
  EXPECT_TRUE(store.claim_deferred({t.rc}).empty());
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "RECEIVED"), 1);
  // The lease may now be extended; the success, still marked deferred,
  // is written through the claim.
  store.extend_visibility({t.rc.msg_id}, 60, true);
  auto res = store.finish({finished(t.rc, outcome_kind::success)});
  EXPECT_EQ(res.states,
            (std::vector<db::write_state>{db::write_state::written}));
  EXPECT_EQ(events(e.conn, t.domain, t.sent.command_id),
            (strings{"SENT", "RECEIVED", "COMPLETED"}));
}

TEST(DeferredClaim, BatchesDuplicatesAndRetriesAreClaimedAtTheRead) {
  bus_env e;
  auto domain = test::unique_name("dcb");
  std::vector<batch_command> cmds(2);
  for (auto& c : cmds) {
    c.command_type = "Ok";
    c.command_id = uuid::random();
  }
  e.bus.create_batch(domain, cmds);
  // A second message of an ordinary command: it is read twice at once.
  auto single = e.bus.send(make_req(domain, "Ok"));
  e.conn.query("SELECT pgmq.send($1, message) FROM pgmq.q_" + domain
                 + "__commands WHERE msg_id = $2::bigint",
               queue_of(domain), std::to_string(single.msg_id));
  db::worker_store store{e.conn, domain};
  auto r = store.receive(30, 10, deferring());
  int deferred = 0;
  for (auto& rc : r.commands)
    deferred += rc.deferred ? 1 : 0;
  EXPECT_EQ(deferred, 0);
  // The batch's two commands and one delivery of the duplicated command
  // are claimed; the second message of that command is skipped.
  EXPECT_EQ(r.commands.size(), 3u);
  EXPECT_EQ(r.rejected.size(), 1u);
  EXPECT_EQ(count_status(e.conn, domain, "IN_PROGRESS"), 3);
}

TEST(DeferredClaim, AReadTheDatabaseForgotCannotWriteOverTheNextOne) {
  // After a failover to an asynchronous standby the read may be forgotten:
  // the message is back as it was (read_ct 0, visible), and the next read
  // gives it the same read_ct. Its vt differs, so only the delivery of the
  // read the database knows writes.
  bus_env e;
  auto t = read_one(e);
  e.conn.query("UPDATE pgmq.\"q_" + t.domain
                 + "__commands\" SET read_ct = 0, vt = clock_timestamp() - "
                   "interval '1 second' WHERE msg_id = $1::bigint",
               std::to_string(t.rc.msg_id));
  db::worker_store store{e.conn, t.domain};
  auto again = store.receive(30, 10, deferring());
  ASSERT_EQ(again.commands.size(), 1u);
  auto& known = again.commands[0];
  ASSERT_EQ(known.read_ct, t.rc.read_ct);
  ASSERT_EQ(known.attempt, t.rc.attempt);
  EXPECT_NE(known.vt_us, t.rc.vt_us);
  // Both outcomes in one write, the forgotten one first.
  auto res = store.finish({finished(t.rc, outcome_kind::success),
                           finished(known, outcome_kind::success)});
  EXPECT_EQ(res.states,
            (std::vector<db::write_state>{db::write_state::stale,
                                          db::write_state::written}));
  EXPECT_EQ(count_events(e.conn, t.domain, t.sent.command_id, "COMPLETED"), 1);
  EXPECT_EQ(audit_detail(e.conn, t.domain, t.sent.command_id, "RECEIVED",
                         "{claim}"),
            opt_str{known.claim.to_string()});
  EXPECT_EQ(queue_rows(e.conn, t.domain + "__replies"), 1);
}
