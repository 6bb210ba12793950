// A claim the database forgot. After a failover to an asynchronous standby
// (or a restore to an earlier point) the transactions the old primary had
// acknowledged but not shipped are gone, and with them the claims they
// made: the message is visible again with its earlier vt and read_ct, the
// command is back at its earlier attempts, and the RECEIVED row is gone. The
// message is then read and its command claimed again AT THE SAME ATTEMPT,
// while the delivery of the forgotten claim may still bring its outcome.
// These tests make the database forget a claim (they undo exactly what the
// claim wrote, as the loss of its transaction does) and hand the outcomes
// of both deliveries to the writer, in one write and in separate ones, on
// one connection and on two: one outcome only, the one of the claim the
// database knows (sql/commandbus/V007__cmdbus_claim_fence.sql).

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/worker_store.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

/// A command of a fresh domain (with a reply queue) read twice: the
/// database forgot the first claim, so the second delivery has the same
/// msg_id and the same attempt.
struct lost_claim {
  std::string domain;
  send_result sent;
  received_command forgotten;
  received_command current;
};

/// Undoes what the claim of `rc` wrote, in one transaction, as the loss of
/// the claim's own transaction leaves it: the message visible with its
/// earlier read_ct, the command at its earlier attempts (PENDING before
/// the first), and no RECEIVED row of that claim.
void forget_claim(db::connection& c, const std::string& domain,
                  const received_command& rc) {
  auto table = db::queue_table(db::command_queue(domain));
  auto id = rc.cmd.command_id.to_string();
  c.exec("BEGIN");
  c.query("UPDATE pgmq.\"" + table
            + "\" SET vt = clock_timestamp(), read_ct = read_ct - 1 "
              "WHERE msg_id = $1",
          std::to_string(rc.msg_id));
  c.query("UPDATE commandbus.command SET attempts = attempts - 1, status = "
          "CASE WHEN attempts = 1 THEN 'PENDING' ELSE status END "
          "WHERE domain = $1 AND command_id = $2::uuid",
          domain, id);
  c.query("DELETE FROM commandbus.audit WHERE audit_id = (SELECT "
          "max(audit_id) FROM commandbus.audit WHERE domain = $1 AND "
          "command_id = $2::uuid AND event_type = 'RECEIVED')",
          domain, id);
  c.exec("COMMIT");
}

/// Sends a command of `domain`, claims it through `first`, makes the database
/// forget that claim and claims it again through `second`.
lost_claim claim_twice(bus_env& e, const std::string& domain,
                       db::worker_store& first, db::worker_store& second) {
  lost_claim out;
  out.domain = domain;
  auto req = make_req(out.domain, "Ok");
  req.reply_to = out.domain + "__replies";
  out.sent = e.bus.send(req);
  auto a = first.receive(30, 1);
  if (a.commands.size() != 1)
    throw std::runtime_error("expected one command");
  out.forgotten = a.commands[0];
  forget_claim(e.conn, out.domain, out.forgotten);
  auto b = second.receive(30, 1);
  if (b.commands.size() != 1)
    throw std::runtime_error("expected the command again");
  out.current = b.commands[0];
  return out;
}

db::finished_command finished(const received_command& rc, outcome_kind kind) {
  db::finished_command x;
  x.rc = rc;
  x.out.kind = kind;
  if (kind == outcome_kind::success) {
    x.out.result = json::parse(R"({"ok":true})");
  } else {
    x.out.error_code = "E";
    x.out.error_message = "failed";
  }
  return x;
}

db::retry_command retried(const received_command& rc) {
  db::retry_command x;
  x.rc = rc;
  x.out.kind = outcome_kind::transient;
  x.out.error_code = "T";
  x.out.error_message = "later";
  x.backoff_seconds = 600;
  return x;
}

/// The audit event a final outcome of `kind` writes.
const char* final_event(outcome_kind kind) {
  switch (kind) {
    case outcome_kind::success: return "COMPLETED";
    case outcome_kind::business_rule: return "BUSINESS_RULE_FAILED";
    default: return "MOVED_TO_TSQ";
  }
}

const char* final_status(outcome_kind kind) {
  switch (kind) {
    case outcome_kind::success: return "COMPLETED";
    case outcome_kind::business_rule: return "FAILED";
    default: return "IN_TROUBLESHOOTING_QUEUE";
  }
}

/// Replies an outcome of `kind` sends (a move to the TSQ sends none).
int64_t replies_of(outcome_kind kind) {
  return kind == outcome_kind::permanent ? 0 : 1;
}

int64_t replies(db::connection& c, const std::string& domain) {
  return queue_length(c, domain + "__replies");
}

/// Expects exactly one final outcome of `kind` for the command of `l`.
void expect_one_outcome(db::connection& c, const lost_claim& l,
                        outcome_kind kind) {
  EXPECT_EQ(count_events(c, l.domain, l.sent.command_id, final_event(kind)), 1);
  EXPECT_EQ(replies(c, l.domain), replies_of(kind));
  EXPECT_EQ(status_of(c, l.domain, l.sent.command_id),
            opt_str{final_status(kind)});
  EXPECT_EQ(queue_rows(c, queue_of(l.domain)), 0);
}

/// Expects that nothing of an outcome was written for the command of `l`.
void expect_no_outcome(db::connection& c, const lost_claim& l) {
  EXPECT_EQ(status_of(c, l.domain, l.sent.command_id), opt_str{"IN_PROGRESS"});
  for (auto kind : {outcome_kind::success, outcome_kind::business_rule,
                    outcome_kind::permanent})
    EXPECT_EQ(count_events(c, l.domain, l.sent.command_id, final_event(kind)),
              0);
  EXPECT_EQ(replies(c, l.domain), 0);
  EXPECT_EQ(queue_rows(c, queue_of(l.domain)), 1);
}

const outcome_kind final_kinds[] = {
  outcome_kind::success, outcome_kind::business_rule, outcome_kind::permanent};

} // namespace

TEST(LostClaim, TheClaimIsForgottenAndMadeAgainAtTheSameAttempt) {
  bus_env e;
  auto domain = test::unique_name("lc");
  db::worker_store store{e.conn, domain};
  auto l = claim_twice(e, domain, store, store);
  EXPECT_EQ(l.forgotten.msg_id, l.current.msg_id);
  EXPECT_EQ(l.forgotten.attempt, 1);
  EXPECT_EQ(l.current.attempt, 1);
  EXPECT_EQ(count_events(e.conn, l.domain, l.sent.command_id, "RECEIVED"), 1);
}

TEST(LostClaim, BothOutcomesInOneWriteGiveOneOutcome) {
  for (auto kind : final_kinds) {
    for (bool forgotten_first : {true, false}) {
      SCOPED_TRACE(
        std::string{final_event(kind)}
        + (forgotten_first ? ", forgotten first" : ", current first"));
      bus_env e;
      auto domain = test::unique_name("lc");
      db::worker_store store{e.conn, domain};
      auto l = claim_twice(e, domain, store, store);
      auto old_one = finished(l.forgotten, kind);
      auto new_one = finished(l.current, kind);
      auto res = forgotten_first ? store.finish({old_one, new_one})
                                 : store.finish({new_one, old_one});
      EXPECT_EQ(res.stale, (std::vector<int64_t>{l.forgotten.msg_id}));
      using ws = db::write_state;
      EXPECT_EQ(res.states, forgotten_first
                              ? (std::vector<ws>{ws::stale, ws::written})
                              : (std::vector<ws>{ws::written, ws::stale}));
      expect_one_outcome(e.conn, l, kind);
    }
  }
}

TEST(LostClaim, TheForgottenClaimWritesNothingInAWriteOfItsOwn) {
  for (auto kind : final_kinds) {
    SCOPED_TRACE(final_event(kind));
    bus_env e;
    auto domain = test::unique_name("lc");
    db::worker_store store{e.conn, domain};
    auto l = claim_twice(e, domain, store, store);
    auto res = store.finish({finished(l.forgotten, kind)});
    EXPECT_EQ(res.stale, (std::vector<int64_t>{l.forgotten.msg_id}));
    expect_no_outcome(e.conn, l);
    res = store.finish({finished(l.current, kind)});
    EXPECT_TRUE(res.stale.empty());
    expect_one_outcome(e.conn, l, kind);
  }
}

TEST(LostClaim, TwoWorkersWriteTheOutcomeOfTheKnownClaimOnly) {
  bus_env e;
  auto other = connect();
  auto domain = test::unique_name("lc");
  db::worker_store a{e.conn, domain};
  db::worker_store b{other, domain};
  // Worker a's claim is forgotten and worker b claims the command again;
  // a writes first, then b.
  auto l = claim_twice(e, domain, a, b);
  auto res = a.finish({finished(l.forgotten, outcome_kind::success)});
  EXPECT_EQ(res.stale, (std::vector<int64_t>{l.forgotten.msg_id}));
  expect_no_outcome(e.conn, l);
  res = b.finish({finished(l.current, outcome_kind::success)});
  EXPECT_TRUE(res.stale.empty());
  expect_one_outcome(e.conn, l, outcome_kind::success);
}

TEST(LostClaim, TwoWorkersWritingAtOnceGiveOneOutcome) {
  bus_env e;
  auto conn_a = connect();
  auto conn_b = connect();
  auto domain = test::unique_name("lc");
  db::worker_store a{conn_a, domain};
  db::worker_store b{conn_b, domain};
  auto l = claim_twice(e, domain, a, b);
  db::finish_result res_a, res_b;
  std::thread ta{
    [&] { res_a = a.finish({finished(l.forgotten, outcome_kind::success)}); }};
  std::thread tb{
    [&] { res_b = b.finish({finished(l.current, outcome_kind::success)}); }};
  ta.join();
  tb.join();
  EXPECT_EQ(res_a.stale, (std::vector<int64_t>{l.forgotten.msg_id}));
  EXPECT_TRUE(res_b.stale.empty());
  expect_one_outcome(e.conn, l, outcome_kind::success);
}

TEST(LostClaim, ADeliveryGivenTwiceInOneWriteIsWrittenOnce) {
  bus_env e;
  auto domain = test::unique_name("lc");
  db::worker_store store{e.conn, domain};
  auto req = make_req(domain, "Ok");
  req.reply_to = domain + "__replies";
  auto sent = e.bus.send(req);
  auto got = store.receive(30, 1);
  ASSERT_EQ(got.commands.size(), 1u);
  auto x = finished(got.commands[0], outcome_kind::success);
  auto res = store.finish({x, x});
  EXPECT_EQ(res.stale, (std::vector<int64_t>{x.rc.msg_id}));
  EXPECT_EQ(res.states, (std::vector<db::write_state>{db::write_state::written,
                                                      db::write_state::stale}));
  EXPECT_EQ(count_events(e.conn, domain, sent.command_id, "COMPLETED"), 1);
  EXPECT_EQ(replies(e.conn, domain), 1);
}

TEST(LostClaim, TheRetryOfTheForgottenClaimIsNotWritten) {
  bus_env e;
  auto domain = test::unique_name("lc");
  db::worker_store store{e.conn, domain};
  auto l = claim_twice(e, domain, store, store);
  // In one write: the current delivery's retry only.
  auto res = store.reschedule({retried(l.forgotten), retried(l.current)});
  EXPECT_EQ(res.states, (std::vector<db::write_state>{
                          db::write_state::stale, db::write_state::written}));
  EXPECT_EQ(count_events(e.conn, l.domain, l.sent.command_id, "FAILED"), 1);
  // Alone: nothing.
  res = store.reschedule({retried(l.forgotten)});
  EXPECT_EQ(res.stale, (std::vector<int64_t>{l.forgotten.msg_id}));
  EXPECT_EQ(count_events(e.conn, l.domain, l.sent.command_id, "FAILED"), 1);
}

TEST(LostClaim, AWriteRepeatedAfterItCommittedIsItsOwn) {
  // A write whose commit went through although its answer was lost is
  // written again by the writer: it must neither write twice nor count its
  // own outcome as another delivery's.
  bus_env e;
  auto domain = test::unique_name("lc");
  db::worker_store store{e.conn, domain};
  auto req = make_req(domain, "Ok");
  req.reply_to = domain + "__replies";
  auto sent = e.bus.send(req);
  auto other = e.bus.send(make_req(domain, "Ok"));
  auto got = store.receive(30, 2);
  ASSERT_EQ(got.commands.size(), 2u);
  auto& done = got.commands[0].cmd.command_id == sent.command_id
                 ? got.commands[0]
                 : got.commands[1];
  auto& retry = &done == &got.commands[0] ? got.commands[1] : got.commands[0];
  using ws = db::write_state;
  auto x = finished(done, outcome_kind::success);
  EXPECT_EQ(store.finish({x}).states, (std::vector<ws>{ws::written}));
  EXPECT_EQ(store.finish({x}).states, (std::vector<ws>{ws::already_written}));
  EXPECT_EQ(count_events(e.conn, domain, sent.command_id, "COMPLETED"), 1);
  EXPECT_EQ(replies(e.conn, domain), 1);
  EXPECT_EQ(store.reschedule({retried(retry)}).states,
            (std::vector<ws>{ws::written}));
  EXPECT_EQ(store.reschedule({retried(retry)}).states,
            (std::vector<ws>{ws::already_written}));
  EXPECT_EQ(count_events(e.conn, domain, other.command_id, "FAILED"), 1);
}

TEST(LostClaim, ALeaseExtensionKeepsTheClaim) {
  bus_env e;
  auto domain = test::unique_name("lc");
  db::worker_store store{e.conn, domain};
  auto sent = e.bus.send(make_req(domain, "Ok"));
  auto got = store.receive(30, 1);
  ASSERT_EQ(got.commands.size(), 1u);
  EXPECT_EQ(store.extend_visibility({got.commands[0].msg_id}, 60), 1);
  EXPECT_EQ(store.extend_visibility({got.commands[0].msg_id}, 90, true), 1);
  EXPECT_TRUE(store.finish({finished(got.commands[0], outcome_kind::success)})
                .stale.empty());
  EXPECT_EQ(status_of(e.conn, domain, sent.command_id), opt_str{"COMPLETED"});
}
