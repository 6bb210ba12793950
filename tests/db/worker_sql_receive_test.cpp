// Tests of the set-based worker functions (sql/commandbus/V004) against a real
// PostgreSQL; this part: cmdbus_receive with the receive guard. They check the
// rows the reference worker writes: status transitions, attempts, audit rows
// and their details, queue and archive contents, replies and their NOTIFY, and
// the inline batch counters with the batches that just became complete (see
// docs/design.md). Commands are sent with command_bus; the functions are called
// with parameterised SQL. Every test works in its own domain (and queues), so
// tests never see each other's rows. Shared fixtures:
// tests/db/worker_sql_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/worker_sql_support.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;
using namespace cmdbus::worker_sql_test;

// -- cmdbus_receive ----------------------------------------------------------

TEST(WorkerSqlReceive, EmptyQueueReturnsNoRows) {
  env e;
  EXPECT_TRUE(receive(e.conn, e.domain, e.queue).empty());
}

TEST(WorkerSqlReceive, ClaimsSentCommands) {
  env e;
  auto reply_queue = e.domain + "__replies";
  auto req1 = make_req(e.domain, reply_queue, 5);
  auto req2 = make_req(e.domain);
  auto s1 = e.bus.send(req1);
  auto s2 = e.bus.send(req2);

  auto rows = receive(e.conn, e.domain, e.queue, 30, 10);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].msg_id, s1.msg_id);
  EXPECT_EQ(rows[1].msg_id, s2.msg_id);
  for (auto& r : rows) {
    EXPECT_EQ(r.outcome, "OK");
    EXPECT_EQ(r.read_ct, 1);
    EXPECT_EQ(r.command_type, "DebitAccount");
    EXPECT_EQ(r.status, "IN_PROGRESS");
    EXPECT_EQ(r.attempts, "1");
    EXPECT_FALSE(r.batch_id);
  }
  EXPECT_EQ(rows[0].command_id, req1.command_id.to_string());
  EXPECT_EQ(rows[0].max_attempts, "5");
  EXPECT_EQ(rows[0].correlation_id, req1.correlation_id->to_string());
  EXPECT_EQ(rows[0].reply_to, reply_queue);
  EXPECT_TRUE(json_eq(e.conn, rows[0].message,
                      R"({"domain":")" + e.domain
                        + R"(","command_type":"DebitAccount","command_id":")"
                        + req1.command_id.to_string()
                        + R"(","correlation_id":")"
                        + req1.correlation_id->to_string()
                        + R"(","data":{"amount":100},"reply_to":")"
                        + reply_queue + R"("})"));
  EXPECT_EQ(rows[1].command_id, req2.command_id.to_string());
  EXPECT_EQ(rows[1].max_attempts, "3");
  EXPECT_FALSE(rows[1].reply_to) << "reply_to is NULL when reply_queue = ''";

  auto id1 = req1.command_id.to_string();
  auto cmd = read_command(e.conn, e.domain, id1);
  EXPECT_EQ(cmd.status, "IN_PROGRESS");
  EXPECT_EQ(cmd.attempts, 1);
  EXPECT_EQ(audit_events(e.conn, e.domain, id1),
            (std::vector<std::string>{"SENT", "RECEIVED"}));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id1, "RECEIVED"),
                      R"({"msg_id":)" + std::to_string(s1.msg_id)
                        + R"(,"attempt":1,"max_attempts":5})"));

  // Claimed messages stay in the queue, invisible for the vt.
  EXPECT_TRUE(in_queue(e.conn, e.queue, s1.msg_id));
  EXPECT_TRUE(e.conn
                .query("SELECT bool_and(vt > now() + interval '29 seconds')"
                       " FROM pgmq.q_"
                         + e.queue)
                .boolean(0, 0));
  EXPECT_TRUE(receive(e.conn, e.domain, e.queue).empty());
}

TEST(WorkerSqlReceive, HonoursQuantity) {
  env e;
  for (int i = 0; i < 5; ++i)
    send(e);
  EXPECT_EQ(receive(e.conn, e.domain, e.queue, 30, 2).size(), 2u);
  EXPECT_EQ(receive(e.conn, e.domain, e.queue, 30, 2).size(), 2u);
  EXPECT_EQ(receive(e.conn, e.domain, e.queue, 30, 2).size(), 1u);
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), 5);
}

TEST(WorkerSqlReceive, MalformedMessagesAreArchivedAsInvalid) {
  env e;
  std::vector<std::string> bad = {
    R"([1])",
    R"("just a string")",
    R"({})",
    R"({"command_type":"X"})",
    R"({"command_id":123})",
    R"({"command_id":null})",
    R"({"command_id":"not-a-uuid"})",
    R"({"command_id":"1234567-1234-1234-1234-123456789012"})",
    R"({"command_id":"{12345678-1234-1234-1234-123456789012"})",
  };
  std::vector<int64_t> ids;
  for (auto& m : bad)
    ids.push_back(send_raw(e.conn, e.queue, m));

  auto rows = receive(e.conn, e.domain, e.queue, 30, 20);
  ASSERT_EQ(rows.size(), bad.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(bad[i]);
    EXPECT_EQ(rows[i].msg_id, ids[i]);
    EXPECT_EQ(rows[i].outcome, "INVALID");
    EXPECT_TRUE(json_eq(e.conn, rows[i].message, bad[i]));
    EXPECT_FALSE(rows[i].command_id);
    EXPECT_FALSE(rows[i].status);
    EXPECT_FALSE(in_queue(e.conn, e.queue, ids[i]));
    EXPECT_TRUE(in_archive(e.conn, e.queue, ids[i]));
  }
  EXPECT_EQ(e.conn
              .query("SELECT count(*) FROM commandbus.audit WHERE domain = $1",
                     e.domain)
              .int64(0, 0),
            0);
}

TEST(WorkerSqlReceive, AcceptsEveryUuidSpellingOfPostgres) {
  env e;
  // Claim the bus's own messages first, then re-deliver each command with a
  // differently spelled command_id.
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(send(e).first);
  ASSERT_EQ(receive(e.conn, e.domain, e.queue).size(), 3u);

  auto upper = ids[0];
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char ch) { return std::toupper(ch); });
  auto braces = "{" + ids[1] + "}";
  auto bare = ids[2];
  bare.erase(std::remove(bare.begin(), bare.end(), '-'), bare.end());
  for (auto& spelled : {upper, braces, bare})
    send_raw(e.conn, e.queue, R"({"command_id":")" + spelled + R"("})");

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i].outcome, "OK");
    EXPECT_EQ(rows[i].command_id, ids[i]);
    EXPECT_EQ(rows[i].attempts, "2");
  }
}

TEST(WorkerSqlReceive, UnknownCommandIsSkipped) {
  env e;
  // One id nobody sent, one sent in another domain.
  auto unknown = test::new_uuid();
  env other;
  auto foreign = send(other).first;
  auto m1 = send_raw(e.conn, e.queue, R"({"command_id":")" + unknown + R"("})");
  auto m2 = send_raw(e.conn, e.queue, R"({"command_id":")" + foreign + R"("})");

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 2u);
  for (auto& r : rows) {
    EXPECT_EQ(r.outcome, "SKIPPED");
    EXPECT_FALSE(r.status);
    EXPECT_FALSE(r.attempts);
  }
  EXPECT_EQ(rows[0].command_id, unknown);
  EXPECT_EQ(rows[1].command_id, foreign);
  EXPECT_TRUE(in_archive(e.conn, e.queue, m1));
  EXPECT_TRUE(in_archive(e.conn, e.queue, m2));
  EXPECT_FALSE(in_queue(e.conn, e.queue, m1));

  auto trail = audit_trail(e.conn, e.domain, unknown);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "RECEIVE_SKIPPED");
  EXPECT_TRUE(json_eq(e.conn, trail[0].details,
                      R"({"msg_id":)" + std::to_string(m1)
                        + R"(,"reason":"UNKNOWN_COMMAND","status":null})"));
  EXPECT_TRUE(json_eq(e.conn,
                      last_details(e.conn, e.domain, foreign, "RECEIVE_SKIPPED"),
                      R"({"msg_id":)" + std::to_string(m2)
                        + R"(,"reason":"UNKNOWN_COMMAND","status":null})"));
  // The other domain's command is untouched.
  EXPECT_EQ(read_command(other.conn, other.domain, foreign).attempts, 0);
}

TEST(WorkerSqlReceive, TerminalStatusesAreSkipped) {
  env e;
  for (auto& status : terminal_statuses) {
    SCOPED_TRACE(status);
    auto [id, msg_id] = send(e);
    set_status(e.conn, e.domain, id, status);

    auto rows = receive(e.conn, e.domain, e.queue);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].outcome, "SKIPPED");
    EXPECT_EQ(rows[0].command_id, id);
    EXPECT_EQ(rows[0].status, status);
    EXPECT_FALSE(rows[0].attempts);

    auto cmd = read_command(e.conn, e.domain, id);
    EXPECT_EQ(cmd.status, status);
    EXPECT_EQ(cmd.attempts, 0);
    EXPECT_FALSE(in_queue(e.conn, e.queue, msg_id));
    EXPECT_TRUE(in_archive(e.conn, e.queue, msg_id));
    EXPECT_EQ(audit_events(e.conn, e.domain, id),
              (std::vector<std::string>{"SENT", "RECEIVE_SKIPPED"}));
    EXPECT_TRUE(json_eq(
      e.conn, last_details(e.conn, e.domain, id, "RECEIVE_SKIPPED"),
      R"({"msg_id":)" + std::to_string(msg_id)
        + R"(,"reason":"TERMINAL_STATUS","status":")" + status + R"("})"));
  }
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), 0);
}

TEST(WorkerSqlReceive, DuplicateMessagesInOneReadClaimOnce) {
  env e;
  auto [id, first] = send(e);
  auto body = R"({"command_id":")" + id + R"("})";
  auto second = send_raw(e.conn, e.queue, body);
  auto third = send_raw(e.conn, e.queue, body);

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].msg_id, first);
  EXPECT_EQ(rows[0].outcome, "OK");
  EXPECT_EQ(rows[0].attempts, "1");
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(rows[i].outcome, "SKIPPED");
    EXPECT_EQ(rows[i].command_id, id);
    EXPECT_EQ(rows[i].status, "IN_PROGRESS");
  }
  EXPECT_EQ(read_command(e.conn, e.domain, id).attempts, 1);
  EXPECT_TRUE(in_queue(e.conn, e.queue, first));
  EXPECT_TRUE(in_archive(e.conn, e.queue, second));
  EXPECT_TRUE(in_archive(e.conn, e.queue, third));

  auto trail = audit_trail(e.conn, e.domain, id);
  ASSERT_EQ(trail.size(), 4u);
  EXPECT_EQ(trail[1].event_type, "RECEIVED");
  EXPECT_TRUE(json_eq(e.conn, trail[1].details,
                      R"({"msg_id":)" + std::to_string(first)
                        + R"(,"attempt":1,"max_attempts":3})"));
  EXPECT_EQ(trail[2].event_type, "RECEIVE_SKIPPED");
  EXPECT_TRUE(
    json_eq(e.conn, trail[2].details,
            R"({"msg_id":)" + std::to_string(second)
              + R"(,"reason":"DUPLICATE_MESSAGE","status":"IN_PROGRESS"})"));
  EXPECT_TRUE(
    json_eq(e.conn, trail[3].details,
            R"({"msg_id":)" + std::to_string(third)
              + R"(,"reason":"DUPLICATE_MESSAGE","status":"IN_PROGRESS"})"));
}

TEST(WorkerSqlReceive, DuplicateOfTerminalCommandIsSkippedForBoth) {
  env e;
  auto [id, first] = send(e);
  set_status(e.conn, e.domain, id, "COMPLETED");
  auto second = send_raw(e.conn, e.queue, R"({"command_id":")" + id + R"("})");

  auto rows = receive(e.conn, e.domain, e.queue);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].outcome, "SKIPPED");
  EXPECT_EQ(rows[1].outcome, "SKIPPED");
  EXPECT_TRUE(json_eq(
    e.conn, audit_trail(e.conn, e.domain, id).at(1).details,
    R"({"msg_id":)" + std::to_string(first)
      + R"(,"reason":"TERMINAL_STATUS","status":"COMPLETED"})"));
  EXPECT_TRUE(json_eq(
    e.conn, audit_trail(e.conn, e.domain, id).at(2).details,
    R"({"msg_id":)" + std::to_string(second)
      + R"(,"reason":"DUPLICATE_MESSAGE","status":"COMPLETED"})"));
  EXPECT_TRUE(in_archive(e.conn, e.queue, first));
  EXPECT_TRUE(in_archive(e.conn, e.queue, second));
}

TEST(WorkerSqlReceive, AttemptsCountAcrossRedelivery) {
  env e;
  auto [id, msg_id] = send(e, std::nullopt, 4);
  for (int attempt = 1; attempt <= 3; ++attempt) {
    SCOPED_TRACE(attempt);
    // vt 0: visible again at once.
    auto rows = receive(e.conn, e.domain, e.queue, 0, 10);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].msg_id, msg_id);
    EXPECT_EQ(rows[0].read_ct, attempt);
    EXPECT_EQ(rows[0].attempts, std::to_string(attempt));
    EXPECT_EQ(rows[0].max_attempts, "4");
    EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "RECEIVED"),
                        R"({"msg_id":)" + std::to_string(msg_id)
                          + R"(,"attempt":)" + std::to_string(attempt)
                          + R"(,"max_attempts":4})"));
  }
  EXPECT_EQ(read_command(e.conn, e.domain, id).attempts, 3);
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), 3);
}

TEST(WorkerSqlReceive, StartsBatchOnce) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 3);
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).status, "PENDING");

  auto rows = receive(e.conn, e.domain, e.queue, 30, 2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].batch_id, batch_id);
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_TRUE(b.started_at);
  auto started_at = e.conn
                      .query("SELECT started_at::text FROM commandbus.batch"
                             " WHERE domain = $1 AND batch_id = $2::uuid",
                             e.domain, batch_id)
                      .opt_text(0, 0);

  ASSERT_EQ(receive(e.conn, e.domain, e.queue, 30, 2).size(), 1u);
  auto trail = audit_trail(e.conn, e.domain, batch_id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "BATCH_STARTED");
  EXPECT_TRUE(json_eq(e.conn, trail[0].details,
                      R"({"batch_id":")" + batch_id + R"("})"));
  EXPECT_EQ(e.conn
              .query("SELECT started_at::text FROM commandbus.batch"
                     " WHERE domain = $1 AND batch_id = $2::uuid",
                     e.domain, batch_id)
              .opt_text(0, 0),
            started_at);
  EXPECT_EQ(count_events(e.conn, e.domain, "RECEIVED"), 3);
}
