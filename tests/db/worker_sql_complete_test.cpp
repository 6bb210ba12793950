// Tests of the set-based worker functions (sql/commandbus/V004) against a real
// PostgreSQL; this part: cmdbus_complete. They check the rows the reference
// worker writes: status transitions, attempts, audit rows and their details,
// queue and archive contents, replies and their NOTIFY, and the inline batch
// counters with the batches that just became complete (see docs/design.md).
// Commands are sent with command_bus; the functions are called with
// parameterised SQL. Every test works in its own domain (and queues), so tests
// never see each other's rows. Shared fixtures:
// tests/db/worker_sql_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/worker_sql_support.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;
using namespace cmdbus::worker_sql_test;

// -- cmdbus_complete ---------------------------------------------------------

TEST(WorkerSqlComplete, CompletesWithoutReply) {
  env e;
  auto [id, msg_id] = send(e);
  receive(e.conn, e.domain, e.queue);

  auto done = complete(e.conn, e.domain, e.queue, {{msg_id, id, true}});
  EXPECT_TRUE(done.empty()) << "no batch";

  EXPECT_EQ(read_command(e.conn, e.domain, id).status, "COMPLETED");
  EXPECT_FALSE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_FALSE(in_archive(e.conn, e.queue, msg_id)) << "deleted, not archived";
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "COMPLETED"}));
  EXPECT_TRUE(json_eq(e.conn, last_details(e.conn, e.domain, id, "COMPLETED"),
                      R"({"msg_id":)" + std::to_string(msg_id)
                        + R"(,"reply_to":null,"has_result":true})"));
}

TEST(WorkerSqlComplete, SendsRepliesAndNotifies) {
  env e;
  // Two reply queues; neither exists before the completion.
  auto replies_a = e.domain + "__replies";
  auto replies_b = e.domain + "__other";
  ASSERT_FALSE(queue_exists(e.conn, replies_a));
  ASSERT_FALSE(queue_exists(e.conn, replies_b));
  auto c1 = send(e);
  auto c2 = send(e);
  auto c3 = send(e);
  receive(e.conn, e.domain, e.queue);

  auto listener = test::connect();
  listener.listen(db::notify_channel(replies_a));
  listener.listen(db::notify_channel(replies_b));

  auto reply = [](const std::string& id, const std::string& result) {
    return R"({"command_id":")" + id
           + R"(","correlation_id":null,"outcome":"SUCCESS","result":)"
           + result + "}";
  };
  auto r1 = reply(c1.first, R"({"n":1})");
  auto r2 = reply(c2.first, "null");
  auto r3 = reply(c3.first, R"({"n":3})");
  complete(e.conn, e.domain, e.queue,
           {{c1.second, c1.first, true, replies_a, r1},
            {c2.second, c2.first, false, replies_b, r2},
            {c3.second, c3.first, true, replies_a, r3}});

  auto a = queue_messages(e.conn, replies_a);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(json_eq(e.conn, a[0], r1));
  EXPECT_TRUE(json_eq(e.conn, a[1], r3));
  auto b = queue_messages(e.conn, replies_b);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_TRUE(json_eq(e.conn, b[0], r2));

  std::set<std::string> want = {db::notify_channel(replies_a),
                                db::notify_channel(replies_b)};
  EXPECT_EQ(collect_channels(listener, want), want);

  EXPECT_TRUE(json_eq(e.conn,
                      last_details(e.conn, e.domain, c2.first, "COMPLETED"),
                      R"({"msg_id":)" + std::to_string(c2.second)
                        + R"(,"reply_to":")" + replies_b
                        + R"(","has_result":false})"));
  for (auto* c : {&c1, &c2, &c3})
    EXPECT_EQ(read_command(e.conn, e.domain, c->first).status, "COMPLETED");
}

TEST(WorkerSqlComplete, ReCompleteIsIdempotent) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);
  auto [id, msg_id] = cmds[0];

  auto first = complete(e.conn, e.domain, e.queue, {{msg_id, id}});
  EXPECT_EQ(first, (completions{{batch_id, false}}));
  auto updated_at = read_command(e.conn, e.domain, id).updated_at;

  auto again = complete(e.conn, e.domain, e.queue, {{msg_id, id}});
  EXPECT_TRUE(again.empty()) << "no transition, no counter change";
  auto cmd = read_command(e.conn, e.domain, id);
  EXPECT_EQ(cmd.status, "COMPLETED");
  EXPECT_EQ(cmd.updated_at, updated_at);
  EXPECT_EQ(audit_events(e.conn, e.domain, id),
            (std::vector<std::string>{"SENT", "RECEIVED", "COMPLETED",
                                      "COMPLETED"}));
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS");

  // The same command twice in one call counts once too; a completed one in
  // the same call stays untouched.
  auto [id2, msg2] = cmds[1];
  auto both = complete(e.conn, e.domain, e.queue,
                       {{msg2, id2}, {msg_id, id}, {msg2, id2}});
  EXPECT_EQ(both, (completions{{batch_id, true}}));
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).completed, 2);
  EXPECT_EQ(read_command(e.conn, e.domain, id).updated_at, updated_at);
  EXPECT_EQ(count_events(e.conn, e.domain, "BATCH_COMPLETED"), 1);
  EXPECT_EQ(audit_events(e.conn, e.domain, id2),
            (std::vector<std::string>{"SENT", "RECEIVED", "COMPLETED",
                                      "COMPLETED"}));
}

TEST(WorkerSqlComplete, LateSuccessFromTroubleshootingQueue) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);
  auto [a, ma] = cmds[0];
  auto [b, mb] = cmds[1];

  fail_final(e.conn, e.domain, e.queue, "PERMANENT", {{ma, a}});
  auto batch = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(batch.in_tsq, 1);

  // A late success of the same command (redelivery race): tsq_complete.
  auto done = complete(e.conn, e.domain, e.queue, {{ma, a}});
  EXPECT_EQ(done, (completions{{batch_id, false}}));
  auto cmd = read_command(e.conn, e.domain, a);
  EXPECT_EQ(cmd.status, "COMPLETED");
  EXPECT_EQ(cmd.last_error_type, "PERMANENT") << "COALESCE(new, old)";
  batch = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(batch.in_tsq, 0);
  EXPECT_EQ(batch.completed, 1);

  done = complete(e.conn, e.domain, e.queue, {{mb, b}});
  EXPECT_EQ(done, (completions{{batch_id, true}}));
  batch = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(batch.status, "COMPLETED");
  EXPECT_EQ(batch.completed, 2);
  EXPECT_EQ(batch.in_tsq, 0);
}

TEST(WorkerSqlComplete, CompletesBatchExactlyOnceAcrossCalls) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);

  EXPECT_EQ(complete(e.conn, e.domain, e.queue, {{cmds[0].second, cmds[0].first}}),
            (completions{{batch_id, false}}));
  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_FALSE(b.completed_at);

  EXPECT_EQ(complete(e.conn, e.domain, e.queue, {{cmds[1].second, cmds[1].first}}),
            (completions{{batch_id, true}}));
  b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_TRUE(b.completed_at);
  EXPECT_EQ(b.completed, 2);

  // Redelivered completions change nothing and never complete it again.
  EXPECT_TRUE(complete(e.conn, e.domain, e.queue,
                       {{cmds[0].second, cmds[0].first},
                        {cmds[1].second, cmds[1].first}})
                .empty());
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).completed, 2);

  auto trail = audit_trail(e.conn, e.domain, batch_id);
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_EQ(trail[0].event_type, "BATCH_STARTED");
  EXPECT_EQ(trail[1].event_type, "BATCH_COMPLETED");
  EXPECT_TRUE(json_eq(e.conn, trail[1].details,
                      R"({"batch_id":")" + batch_id
                        + R"(","total_count":2,"completed_count":2,)"
                          R"("canceled_count":0,"failed_count":0})"));
}

TEST(WorkerSqlComplete, AggregatesOneBatchUpdatePerCall) {
  env e;
  auto [batch1, cmds1] = make_batch(e, 3);
  auto [batch2, cmds2] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);

  std::vector<done_item> items;
  for (auto& c : cmds1)
    items.push_back({c.second, c.first});
  items.push_back({cmds2[0].second, cmds2[0].first});
  auto done = complete(e.conn, e.domain, e.queue, items);
  completions expected = {{batch1, true}, {batch2, false}};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(done, expected);

  auto b1 = read_batch(e.conn, e.domain, batch1);
  EXPECT_EQ(b1.status, "COMPLETED");
  EXPECT_EQ(b1.completed, 3);
  auto b2 = read_batch(e.conn, e.domain, batch2);
  EXPECT_EQ(b2.status, "IN_PROGRESS");
  EXPECT_EQ(b2.completed, 1);
  EXPECT_EQ(count_events(e.conn, e.domain, "BATCH_COMPLETED"), 1);
  EXPECT_EQ(count_events(e.conn, e.domain, "COMPLETED"), 4);
}

TEST(WorkerSqlComplete, FailedCommandCompletesBatchWithFailures) {
  env e;
  auto [batch_id, cmds] = make_batch(e, 2);
  receive(e.conn, e.domain, e.queue);

  EXPECT_EQ(fail_final(e.conn, e.domain, e.queue, "BUSINESS_RULE",
                       {{cmds[0].second, cmds[0].first}}),
            (completions{{batch_id, false}}));
  EXPECT_EQ(read_batch(e.conn, e.domain, batch_id).failed, 1);
  EXPECT_EQ(complete(e.conn, e.domain, e.queue, {{cmds[1].second, cmds[1].first}}),
            (completions{{batch_id, true}}));

  auto b = read_batch(e.conn, e.domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_TRUE(b.completed_at);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.failed, 1);
  EXPECT_TRUE(json_eq(e.conn,
                      last_details(e.conn, e.domain, batch_id, "BATCH_COMPLETED"),
                      R"({"batch_id":")" + batch_id
                        + R"(","total_count":2,"completed_count":1,)"
                          R"("canceled_count":0,"failed_count":1})"));
}

TEST(WorkerSqlComplete, UnknownCommandIsAuditedOnly) {
  env e;
  auto unknown = test::new_uuid();
  auto msg_id = send_raw(e.conn, e.queue, R"({"command_id":")" + unknown + R"("})");
  EXPECT_TRUE(complete(e.conn, e.domain, e.queue, {{msg_id, unknown}}).empty());
  EXPECT_FALSE(in_queue(e.conn, e.queue, msg_id));
  EXPECT_EQ(audit_events(e.conn, e.domain, unknown),
            (std::vector<std::string>{"COMPLETED"}));
  EXPECT_EQ(e.conn
              .query("SELECT count(*) FROM commandbus.command WHERE domain = $1",
                     e.domain)
              .int64(0, 0),
            0);
}
