// Tests of the set-based worker functions (sql/commandbus/V004) against a real
// PostgreSQL; this part: cmdbus_fail_final and cmdbus_fail_transient. They
// check the rows the reference worker writes: status transitions, attempts,
// audit rows and their details, queue and archive contents, replies and their
// NOTIFY, and the inline batch counters with the batches that just became
// complete (see docs/design.md). Commands are sent with command_bus; the
// functions are called with parameterised SQL. Every test works in its own
// domain (and queues), so tests never see each other's rows. Shared fixtures:
// tests/db/worker_sql_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/worker_sql_support.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;
using namespace cmdbus::worker_sql_test;

// -- cmdbus_fail_final -------------------------------------------------------

TEST(WorkerSqlFailFinal, PermanentMovesToTroubleshootingQueue) {
  env e;
  auto reply_queue = e.domain + "__replies";
  auto [batch_id, cmds] = make_batch(e, 2);
  auto [id, msg_id] = send(e, reply_queue);
  receive(e.conn, e.domain, e.queue);

  fail_item f;
  f.msg_id = msg_id;
  f.command_id = id;
  f.attempt = 1;
  f.error_code = "BAD_INPUT";
  f.error_msg = "amount must be positive";
  f.error_details = R"({"field":"amount"})";
  f.reply_to = reply_queue;
  f.reply = R"({"outcome":"FAILED"})";
  fail_item g;
  g.msg_id = cmds[0].second;
  g.command_id = cmds[0].first;
  g.attempt = 2;
  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "PERMANENT", {f, g}),
            (completions{{batch_id, false}}));

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "IN_TROUBLESHOOTING_QUEUE");
  EXPECT_EQ(cmd.last_error_type, "PERMANENT");
  EXPECT_EQ(cmd.last_error_code, "BAD_INPUT");
  EXPECT_EQ(cmd.last_error_msg, "amount must be positive");
  EXPECT_FALSE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_TRUE(in_archive(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "MOVED_TO_TSQ"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"attempt":1,"error_code":"BAD_INPUT",)"
                          R"("error_msg":"amount must be positive",)"
                          R"("error_details":{"field":"amount"}})"));
  // NULL error_details is recorded as {} (the reference's default).
  EXPECT_TRUE(json_eq(
    e.conn, last_details(e.conn, e.domain, cmds[0].first, "MOVED_TO_TSQ"),
    R"({"msg_id":)" + std::to_string(cmds[0].second)
      + R"(,"attempt":2,"error_code":"E_CODE",)"
        R"("error_msg":"something broke","error_details":{}})"));
  EXPECT_TRUE(queue_messages(e.conn, reply_queue).empty()) << "no reply to the TSQ";

  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS");
}

TEST(WorkerSqlFailFinal, ExhaustedMovesToTroubleshootingQueue) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 1);
  auto [id, msg_id] = send(e, e.domain + "__replies", 3);
  receive(e.conn, e.domain, e.queue);

  fail_item f;
  f.msg_id = msg_id;
  f.command_id = id;
  f.attempt = 3;
  f.max_attempts = 3;
  f.error_type = "TRANSIENT";
  f.error_code = "TIMEOUT";
  f.error_msg = "upstream timed out";
  f.reply_to = e.domain + "__replies";
  f.reply = R"({"outcome":"FAILED"})";
  fail_item g;
  g.msg_id = cmds[0].second;
  g.command_id = cmds[0].first;
  g.attempt = 3;
  g.max_attempts = 3;  // error_type NULL: TRANSIENT
  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "EXHAUSTED", {f, g}),
            (completions{{batch_id, false}}));

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "IN_TROUBLESHOOTING_QUEUE");
  EXPECT_EQ(cmd.last_error_type, "TRANSIENT");
  EXPECT_EQ(cmd.last_error_code, "TIMEOUT");
  EXPECT_EQ(cmd.last_error_msg, "upstream timed out");
  EXPECT_TRUE(in_archive(e.conn, e.queue, msg_id));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "MOVED_TO_TSQ"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"attempt":3,"max_attempts":3,)"
                          R"("reason":"EXHAUSTED","error_type":"TRANSIENT",)"
                          R"("error_code":"TIMEOUT",)"
                          R"("error_msg":"upstream timed out"})"));
  EXPECT_TRUE(json_eq(
    e.conn, last_details(e.conn, e.domain, cmds[0].first, "MOVED_TO_TSQ"),
    R"({"msg_id":)" + std::to_string(cmds[0].second)
      + R"(,"attempt":3,"max_attempts":3,"reason":"EXHAUSTED",)"
        R"("error_type":"TRANSIENT","error_code":"E_CODE",)"
        R"("error_msg":"something broke"})"));
  EXPECT_EQ(read_command(e.conn, e.domain, cmds[0].first).last_error_type,
            "TRANSIENT");
  EXPECT_TRUE(queue_messages(e.conn, e.domain + "__replies").empty());
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS") << "TSQ items keep a batch open";
}

TEST(WorkerSqlFailFinal, BusinessRuleFailsAndReplies) {
  env e;
  auto reply_queue = e.domain + "__replies";
  auto [batch_id, cmds] = make_batch(e, 1);
  auto [id, msg_id] = send(e, reply_queue);
  receive(e.conn, e.domain, e.queue);

  auto listener = test::connect();
  listener.listen(db::notify_channel(reply_queue));

  auto reply = R"({"command_id":")" + id
               + R"(","correlation_id":null,"outcome":"FAILED",)"
                 R"("result":{"error_code":"CLOSED","error_message":"account closed",)"
                 R"("error_details":{}},"error_code":"CLOSED",)"
                 R"("error_message":"account closed"})";
  fail_item f;
  f.msg_id = msg_id;
  f.command_id = id;
  f.error_type = "PERMANENT";  // ignored for BUSINESS_RULE
  f.error_code = "CLOSED";
  f.error_msg = "account closed";
  f.error_details = "{}";
  f.reply_to = reply_queue;
  f.reply = reply;
  fail_item g;
  g.msg_id = cmds[0].second;
  g.command_id = cmds[0].first;
  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "BUSINESS_RULE", {f, g}),
            (completions{{batch_id, true}}));

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "FAILED");
  EXPECT_EQ(cmd.last_error_type, "BUSINESS_RULE");
  EXPECT_EQ(cmd.last_error_code, "CLOSED");
  EXPECT_EQ(cmd.last_error_msg, "account closed");
  EXPECT_TRUE(in_archive(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED",
                                      "BUSINESS_RULE_FAILED"}));
  EXPECT_TRUE(json_eq(e.conn,
                      last_details(e.conn, e.domain, id, "BUSINESS_RULE_FAILED"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"attempt":1,"error_code":"CLOSED",)"
                          R"("error_msg":"account closed","error_details":{}})"));

  auto replies = queue_messages(e.conn, reply_queue);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_TRUE(json_eq(e.conn, replies[0], reply));
  std::set<std::string> want = {db::notify_channel(reply_queue)};
  EXPECT_EQ(collect_channels(listener, want), want);

  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_EQ(b.failed, 1);
  EXPECT_EQ(count_events(e.conn, e.domain, "BATCH_COMPLETED"), 1);
}

TEST(WorkerSqlFailFinal, UnknownKindRaises) {
  env e;
  auto sent = send(e);
  auto id = sent.first;
  auto msg_id = sent.second;
  receive(e.conn, e.domain, e.queue);
  for (const opt_str& kind : {opt_str{"TRANSIENT"}, opt_str{"permanent"},
                              opt_str{std::nullopt}}) {
    EXPECT_TRUE(raises_invalid(
      [&] { fail_final(e.conn, e.domain, e.queue, kind, {{msg_id, id}}); },
      "unknown kind"));
  }
  EXPECT_EQ(read_command(e.conn, e.domain, id).status, "IN_PROGRESS");
  EXPECT_TRUE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED"}));
}

TEST(WorkerSqlFailFinal, RepeatedFinalFailureCountsOnce) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);
  auto [id, msg_id] = cmds[0];

  fail_item f;
  f.msg_id = msg_id;
  f.command_id = id;
  f.error_code = "FIRST";
  fail_final(e.conn, e.domain, e.queue, "PERMANENT", {f});
  auto updated_at = read_command(e.conn, e.domain, id).updated_at;
  EXPECT_TRUE(fail_final(e.conn, e.domain, e.queue, "PERMANENT", {f}).empty());

  // Again, together with a command that really moves.
  f.error_code = "SECOND";
  fail_item g{cmds[1].second, cmds[1].first};
  g.error_code = "OTHER";
  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "PERMANENT", {f, g}),
            (completions{{batch_id, false}}));

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "IN_TROUBLESHOOTING_QUEUE");
  EXPECT_EQ(cmd.last_error_code, "FIRST") << "no transition, audit only";
  EXPECT_EQ(cmd.updated_at, updated_at);
  EXPECT_EQ(read_command(e.conn, e.domain, cmds[1].first).last_error_code,
            "OTHER");
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "MOVED_TO_TSQ",
                                      "MOVED_TO_TSQ", "MOVED_TO_TSQ"}));
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).in_tsq, 2);

  // A business-rule failure of a command already in the TSQ changes its
  // status but counts nothing (only IN_PROGRESS -> FAILED counts).
  EXPECT_TRUE(fail_final(e.conn, e.domain, e.queue, "BUSINESS_RULE", {f}).empty());
  EXPECT_EQ(read_command(e.conn, e.domain, id).status, "FAILED");
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.in_tsq, 2);
  EXPECT_EQ(b.failed, 0);
}

// -- cmdbus_fail_transient ---------------------------------------------------

TEST(WorkerSqlFailTransient, RecordsErrorAndDelaysRedelivery) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 1);
  auto [id, msg_id] = send(e);
  receive(e.conn, e.domain, e.queue);

  transient_item t;
  t.msg_id = msg_id;
  t.command_id = id;
  t.attempt = 1;
  t.max_attempts = 3;
  t.backoff = 60;
  transient_item u;
  u.msg_id = cmds[0].second;
  u.command_id = cmds[0].first;
  u.backoff = 10;
  EXPECT_EQ(fail_transient(e.conn, e.domain, e.queue, {t, u}), 2);

  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "IN_PROGRESS") << "status unchanged";
  EXPECT_EQ(cmd.attempts, 1);
  EXPECT_EQ(cmd.last_error_type, "TRANSIENT");
  EXPECT_EQ(cmd.last_error_code, "TIMEOUT");
  EXPECT_EQ(cmd.last_error_msg, "upstream timed out");
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "FAILED"}));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "FAILED"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"attempt":1,"max_attempts":3,)"
                          R"("error_type":"TRANSIENT","error_code":"TIMEOUT",)"
                          R"("error_msg":"upstream timed out"})"));

  // Still in the queue, invisible until the backoff passed.
  EXPECT_TRUE(in_queue(e.conn, e.queue, msg_id));
  auto vt_after = [&](int64_t m, int secs) {
    return e.conn
      .query("SELECT vt > now() + make_interval(secs => $2::int)"
             " - interval '1 second' FROM pgmq.q_"
               + e.queue + " WHERE msg_id = $1",
             m, secs)
      .boolean(0, 0);
  };
  EXPECT_TRUE(vt_after(msg_id, 60));
  EXPECT_TRUE(vt_after(cmds[0].second, 10));
  EXPECT_FALSE(vt_after(cmds[0].second, 12));
  EXPECT_TRUE(receive(e.conn, e.domain, e.queue, 30, 10).empty());

  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_EQ(b.completed + b.failed + b.in_tsq, 0);
}

TEST(WorkerSqlFailTransient, ZeroBackoffRedeliversAtOnce) {
  env e;
  auto [id, msg_id] = send(e);
  receive(e.conn, e.domain, e.queue);
  transient_item t;
  t.msg_id = msg_id;
  t.command_id = id;
  t.backoff = 0;
  EXPECT_EQ(fail_transient(e.conn, e.domain, e.queue, {t}), 1);

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].outcome, "OK");
  EXPECT_EQ(rows[0].attempts, "2");
  EXPECT_EQ(rows[0].read_ct, 2);
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "FAILED",
                                      "RECEIVED"}));
}

TEST(WorkerSqlFailTransient, UnknownCommandIsNotAudited) {
  env e;
  auto unknown = test::new_uuid();
  auto msg_id = send_raw(e.conn, e.queue, R"({"command_id":")" + unknown + R"("})");
  transient_item t;
  t.msg_id = msg_id;
  t.command_id = unknown;
  EXPECT_EQ(fail_transient(e.conn, e.domain, e.queue, {t}), 0);
  EXPECT_TRUE(audit_trail(e.conn, e.domain, unknown).empty());
}
