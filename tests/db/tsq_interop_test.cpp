// Interop of the operator actions with the reference library: one command
// is handled by a transcript of the reference TroubleshootingQueue's steps
// (its SQL, run here in one transaction), an identical command in another
// domain by `cmdbus tsq`; the command rows, audit events, reply messages,
// re-sent messages and batch counters must come out the same (ids,
// timestamps and msg_ids aside).

#include "tests/db/tsq_support.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

class TsqInterop : public TsqTest {
protected:
  TsqInterop() : ref(unique_name("tsqref")), ours(unique_name("tsqcli")) {
    env.bus.ensure_queue(db::command_queue(ref));
    env.bus.ensure_queue(db::command_queue(ours));
  }

  struct parked {
    uuid command_id;
    uuid batch_id;
  };

  // A batch of one command with a reply queue, moved to the TSQ (both
  // domains get the same payload and correlation id).
  parked park_in(const std::string& domain) {
    batch_command c;
    c.command_type = "RefundPayment";
    c.command_id = uuid::random();
    c.data = json::parse(R"({"amount":7,"currency":"EUR"})");
    c.correlation_id = correlation;
    c.reply_to = replies;
    auto b = env.bus.create_batch(domain, {c});
    park_spec spec;
    spec.error_code = "CARD_DECLINED";
    to_tsq(domain, c.command_id, spec, b.batch_id);
    return {c.command_id, b.batch_id};
  }

  // -- the reference transcript ---------------------------------------------

  void reference_retry(const parked& p) {
    auto queue = db::command_queue(ref);
    conn.exec("BEGIN");
    auto msg = scalar(conn,
                      "SELECT message::text FROM pgmq.a_" + queue
                        + " WHERE message->>'command_id' = $1 ORDER BY "
                          "msg_id DESC LIMIT 1",
                      p.command_id.to_string());
    ASSERT_TRUE(msg);
    auto new_id = scalar(conn, "SELECT pgmq.send($1, $2::jsonb, 0)::text",
                         queue, msg);
    conn.exec("NOTIFY pgmq_notify_" + queue);
    conn.query("UPDATE commandbus.command SET status = 'PENDING', attempts = "
               "0, msg_id = $3::bigint, last_error_type = NULL, "
               "last_error_code = NULL, last_error_msg = NULL, updated_at = "
               "NOW() WHERE domain = $1 AND command_id = $2::uuid",
               ref, p.command_id.to_string(), new_id);
    conn.query("INSERT INTO commandbus.audit (domain, command_id, event_type, "
               "details_json) VALUES ($1, $2::uuid, 'OPERATOR_RETRY', "
               "$3::jsonb)",
               ref, p.command_id.to_string(),
               R"({"operator":"alice","new_msg_id":)" + *new_id + "}");
    conn.query("SELECT commandbus.sp_tsq_retry($1, $2::uuid)", ref,
               p.batch_id.to_string());
    conn.exec("COMMIT");
  }

  void reference_cancel(const parked& p) {
    conn.exec("BEGIN");
    conn.query("UPDATE commandbus.command SET status = 'CANCELED', "
               "updated_at = NOW() WHERE domain = $1 AND command_id = "
               "$2::uuid",
               ref, p.command_id.to_string());
    conn.query(
      "SELECT pgmq.send($1, jsonb_build_object('command_id', $2::text, "
      "'correlation_id', $3::text, 'outcome', 'CANCELED', 'reason', "
      "'customer gave up'), 0)",
      replies, p.command_id.to_string(), correlation.to_string());
    conn.exec("NOTIFY pgmq_notify_" + replies);
    conn.query("INSERT INTO commandbus.audit (domain, command_id, event_type, "
               "details_json) VALUES ($1, $2::uuid, 'OPERATOR_CANCEL', "
               "jsonb_build_object('operator', 'alice', 'reason', "
               "'customer gave up', 'reply_to', $3::text))",
               ref, p.command_id.to_string(), replies);
    conn.query("SELECT commandbus.sp_tsq_cancel($1, $2::uuid)", ref,
               p.batch_id.to_string());
    conn.exec("COMMIT");
  }

  void reference_complete(const parked& p) {
    conn.exec("BEGIN");
    conn.query("UPDATE commandbus.command SET status = 'COMPLETED', "
               "updated_at = NOW() WHERE domain = $1 AND command_id = "
               "$2::uuid",
               ref, p.command_id.to_string());
    conn.query(
      "SELECT pgmq.send($1, jsonb_build_object('command_id', $2::text, "
      "'correlation_id', $3::text, 'outcome', 'SUCCESS', 'result', "
      "'{\"refunded\":true}'::jsonb), 0)",
      replies, p.command_id.to_string(), correlation.to_string());
    conn.exec("NOTIFY pgmq_notify_" + replies);
    conn.query("INSERT INTO commandbus.audit (domain, command_id, event_type, "
               "details_json) VALUES ($1, $2::uuid, 'OPERATOR_COMPLETE', "
               "jsonb_build_object('operator', 'alice', 'has_result_data', "
               "true, 'reply_to', $3::text))",
               ref, p.command_id.to_string(), replies);
    conn.query("SELECT commandbus.sp_tsq_complete($1, $2::uuid)", ref,
               p.batch_id.to_string());
    conn.exec("COMMIT");
  }

  // -- what is compared -------------------------------------------------------

  // The command row without ids and timestamps.
  opt_str row(const std::string& domain, const parked& p) {
    return scalar(conn,
                  "SELECT concat_ws('|', queue_name = $1 || '__commands', "
                  "command_type, status, attempts, max_attempts, msg_id IS "
                  "NULL, correlation_id, reply_queue, last_error_type, "
                  "last_error_code, last_error_msg, batch_id = $3::uuid) "
                  "FROM commandbus.command WHERE domain = $1 AND command_id "
                  "= $2::uuid",
                  domain, p.command_id.to_string(), p.batch_id.to_string());
  }

  // The audit trail of the command and of its batch, in order, with ids and
  // msg_ids removed from the details.
  opt_str trail(const std::string& domain, const parked& p) {
    return scalar(
      conn,
      "SELECT string_agg(event_type || ' ' || coalesce((details_json - "
      "'msg_id' - 'new_msg_id' - 'batch_id')::text, 'null'), E'\\n' ORDER BY "
      "ts, audit_id) FROM commandbus.audit WHERE domain = $1 AND command_id "
      "IN ($2::uuid, $3::uuid) AND event_type <> 'SENT'",
      domain, p.command_id.to_string(), p.batch_id.to_string());
  }

  // The replies to the command, without its id.
  opt_str reply_of(const parked& p) {
    return scalar(conn,
                  "SELECT string_agg((message - 'command_id')::text, ',' "
                  "ORDER BY msg_id) FROM pgmq.q_"
                    + replies + " WHERE message->>'command_id' = $1",
                  p.command_id.to_string());
  }

  // The messages of the command in its domain's queue, without the ids and
  // domain (which differ by construction).
  opt_str queued(const std::string& domain, const parked& p) {
    return scalar(conn,
                  "SELECT string_agg((message - 'command_id' - "
                  "'domain')::text, ',' ORDER BY msg_id) FROM pgmq.q_"
                    + db::command_queue(domain)
                    + " WHERE message->>'command_id' = $1",
                  p.command_id.to_string());
  }

  std::string counters(const std::string& domain, const parked& p) {
    auto b = read_batch(conn, domain, p.batch_id.to_string());
    return b.status + " total " + std::to_string(b.total) + " completed "
           + std::to_string(b.completed) + " canceled "
           + std::to_string(b.canceled) + " in_tsq " + std::to_string(b.in_tsq)
           + " failed " + std::to_string(b.failed)
           + (b.completed_at ? " done" : "");
  }

  void expect_same(const parked& r, const parked& o) {
    EXPECT_EQ(row(ref, r), row(ours, o));
    EXPECT_EQ(trail(ref, r), trail(ours, o));
    EXPECT_EQ(reply_of(r), reply_of(o));
    EXPECT_EQ(queued(ref, r), queued(ours, o));
    EXPECT_EQ(counters(ref, r), counters(ours, o));
    // Not vacuous: both sides have their operator event.
    EXPECT_TRUE(row(ours, o));
    EXPECT_NE(trail(ours, o).value_or("").find("\nOPERATOR_"),
              std::string::npos)
      << trail(ours, o).value_or("");
  }

  std::string ref;
  std::string ours;
  uuid correlation = uuid::random();
};

TEST_F(TsqInterop, RetryMatchesTheReference) {
  auto r = park_in(ref);
  auto o = park_in(ours);
  reference_retry(r);
  auto res = cli(
    {"tsq", "retry", ours, o.command_id.to_string(), "--operator", "alice"});
  ASSERT_EQ(res.exit_code, 0) << res.err;
  expect_same(r, o);
  EXPECT_NE(row(ours, o).value_or("").find("|PENDING|0|"), std::string::npos)
    << *row(ours, o);
  EXPECT_TRUE(queued(ours, o));
  EXPECT_FALSE(reply_of(o));
}

TEST_F(TsqInterop, CancelMatchesTheReference) {
  auto r = park_in(ref);
  auto o = park_in(ours);
  reference_cancel(r);
  auto res = cli({"tsq", "cancel", ours, o.command_id.to_string(), "--reason",
                  "customer gave up", "--operator", "alice"});
  ASSERT_EQ(res.exit_code, 0) << res.err;
  expect_same(r, o);
  EXPECT_EQ(counters(ours, o).rfind("COMPLETED_WITH_FAILURES", 0), 0u);
  EXPECT_TRUE(reply_of(o));
}

TEST_F(TsqInterop, CompleteMatchesTheReference) {
  auto r = park_in(ref);
  auto o = park_in(ours);
  reference_complete(r);
  auto res = cli({"tsq", "complete", ours, o.command_id.to_string(), "--result",
                  R"({"refunded":true})", "--operator", "alice"});
  ASSERT_EQ(res.exit_code, 0) << res.err;
  expect_same(r, o);
  EXPECT_EQ(counters(ours, o).rfind("COMPLETED total 1 completed 1", 0), 0u);
  EXPECT_TRUE(reply_of(o));
}

} // namespace
