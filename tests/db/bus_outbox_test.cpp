// The outbox pattern: every write on the caller's connection and inside the
// caller's transaction commits or rolls back with the caller's own writes.

#include "tests/db/command_bus_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test::bus;
using namespace std::chrono_literals;

CMDBUS_BULK_SUITE(BusOutbox);

// ============================================================================
// outbox: the caller's connection and transaction
// ============================================================================

TEST_P(BusOutbox, SendRollbackLeavesNothing) {
  bus_env env;
  auto d = test::unique_name("bo");
  auto conn = test::connect();
  auto req = make_req(d);
  {
    db::transaction tx{conn};
    auto res = env.bus.send(req, conn);
    EXPECT_GT(res.msg_id, 0);
    // Visible inside the transaction, invisible outside.
    EXPECT_TRUE(command_row_exists(conn, d, req.command_id));
    EXPECT_FALSE(command_row_exists(env.conn, d, req.command_id));
    EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  } // rollback
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  // The queue was created outside the caller's transaction and survives.
  EXPECT_TRUE(queue_exists(env.conn, queue_of(d)));
  // The id can be sent again after the rollback.
  EXPECT_NO_THROW(env.bus.send(req, conn));
  EXPECT_TRUE(command_row_exists(env.conn, d, req.command_id));
}

TEST_P(BusOutbox, SendCommitKeepsAllThree) {
  bus_env env;
  auto d = test::unique_name("bo");
  auto conn = test::connect();
  auto req = make_req(d);
  conn.exec("CREATE TEMP TABLE business (x int)");
  {
    db::transaction tx{conn};
    conn.exec("INSERT INTO business VALUES (1)");
    env.bus.send(req, conn);
    tx.commit();
  }
  EXPECT_EQ(conn.exec("SELECT count(*) FROM business").int64(0, 0), 1);
  EXPECT_TRUE(command_row_exists(env.conn, d, req.command_id));
  EXPECT_EQ(read_sent(env.conn, d, req.command_id).count, 1);
  EXPECT_EQ(messages_for(env.conn, d, req.command_id), 1);
}

TEST_P(BusOutbox, SendBatchOnCallersTransaction) {
  bus_env env{4, chunked(2)};
  auto d = test::unique_name("bo");
  auto conn = test::connect();
  std::vector<send_request> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(make_req(d));
  {
    db::transaction tx{conn};
    auto res = env.bus.send_batch(reqs, conn);
    EXPECT_EQ(res.chunks_processed, 3);
    EXPECT_EQ(res.total_commands, 5);
    EXPECT_TRUE(conn.in_transaction());
  }
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  {
    db::transaction tx{conn};
    auto res = env.bus.send_batch(reqs, conn);
    EXPECT_EQ(res.total_commands, 5);
    tx.commit();
  }
  EXPECT_EQ(command_rows(env.conn, d), 5);
  EXPECT_EQ(audit_rows(env.conn, d), 5);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 5);
}

// On a connection outside any transaction, each chunk is still one
// transaction: a duplicate in a chunk's second domain leaves nothing of that
// chunk, while the chunk before it stays committed.
TEST_P(BusOutbox, ChunkOnConnectionWithoutTransactionIsAtomic) {
  bus_env env{4, chunked(4)};
  auto a = test::unique_name("bo");
  auto b = test::unique_name("bo");
  auto taken = make_req(b);
  env.bus.send(taken);
  auto conn = test::connect();
  std::vector<send_request> reqs{make_req(a), make_req(a), make_req(b),
                                 make_req(b), // chunk 1
                                 make_req(a), make_req(a), make_req(b)};
  reqs.push_back(taken); // chunk 2: its 4th command exists already
  reqs.back().command_id = taken.command_id;
  EXPECT_THROW(env.bus.send_batch(reqs, conn), duplicate_command_error);
  EXPECT_FALSE(conn.in_transaction());
  EXPECT_EQ(command_rows(env.conn, a), 2);
  EXPECT_EQ(command_rows(env.conn, b), 3);
  EXPECT_EQ(queue_length(env.conn, queue_of(a)), 2);
  EXPECT_EQ(queue_length(env.conn, queue_of(b)), 3);
  EXPECT_EQ(audit_rows(env.conn, a), 2);
  EXPECT_EQ(audit_rows(env.conn, b), 3);
}

TEST_P(BusOutbox, CreateBatchOnCallersTransaction) {
  bus_env env;
  auto d = test::unique_name("bo");
  auto conn = test::connect();
  std::vector<batch_command> cmds{make_cmd(), make_cmd()};
  create_batch_options opts;
  opts.batch_id = uuid::random();
  {
    db::transaction tx{conn};
    auto res = env.bus.create_batch(d, cmds, opts, conn);
    EXPECT_EQ(res.total_commands, 2);
    EXPECT_TRUE(conn.in_transaction());
  }
  EXPECT_FALSE(env.bus.get_batch(d, *opts.batch_id));
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  {
    db::transaction tx{conn};
    env.bus.create_batch(d, cmds, opts, conn);
    tx.commit();
  }
  auto b = env.bus.get_batch(d, *opts.batch_id);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->total_count, 2);
  EXPECT_EQ(command_rows(env.conn, d), 2);
  EXPECT_EQ(audit_rows(env.conn, d), 2);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 2);
}

TEST_P(BusOutbox, NotificationOnlyWhenCallerCommits) {
  bus_env env;
  auto d = test::unique_name("bo");
  auto listener = test::connect();
  listener.listen(db::notify_channel(queue_of(d)));
  auto conn = test::connect();
  {
    db::transaction tx{conn};
    env.bus.send(make_req(d), conn);
    EXPECT_TRUE(listener.wait_for_notifications(300ms).empty());
  } // rollback: never delivered
  EXPECT_TRUE(listener.wait_for_notifications(300ms).empty());
  {
    db::transaction tx{conn};
    env.bus.send(make_req(d), conn);
    env.bus.send_batch({make_req(d), make_req(d)}, conn);
    EXPECT_TRUE(listener.wait_for_notifications(300ms).empty());
    tx.commit();
  }
  auto got = collect_notifications(listener, 1);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], "pgmq_notify_" + queue_of(d));
}
