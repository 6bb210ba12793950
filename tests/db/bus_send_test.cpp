// command_bus::send against the real database: the rows, message and audit
// one send writes, the default max_attempts, reply_to and name validation,
// and the single-send statement's equivalence with pgmq.send.

#include "tests/db/command_bus_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test::bus;
using namespace std::chrono_literals;

// ============================================================================
// send
// ============================================================================

TEST(BusSend, StoresPendingRowAndQueuesReferenceMessage) {
  bus_env env;
  auto d = test::unique_name("bs");
  auto req = make_req(d, "DebitAccount",
                      R"({"amount":100,"currency":"EUR","tags":["a","b"],"nested":{"k":null}})");
  req.correlation_id = uuid::random();
  req.reply_to = d + "__replies";
  req.max_attempts = 5;
  auto res = env.bus.send(req);
  EXPECT_EQ(res.command_id.to_string(), req.command_id.to_string());
  EXPECT_GT(res.msg_id, 0);

  auto row = read_row(env.conn, d, req.command_id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->queue_name, d + "__commands");
  EXPECT_EQ(row->command_type, "DebitAccount");
  EXPECT_EQ(row->status, "PENDING");
  EXPECT_EQ(row->attempts, 0);
  EXPECT_EQ(row->max_attempts, 5);
  EXPECT_EQ(row->msg_id, std::optional<int64_t>{res.msg_id});
  EXPECT_EQ(row->reply_queue, d + "__replies");
  EXPECT_EQ(row->correlation_id, opt_str{req.correlation_id->to_string()});
  EXPECT_FALSE(row->batch_id);

  auto msg = read_message(env.conn, queue_of(d), res.msg_id);
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->keys,
            "command_id,command_type,correlation_id,data,domain,reply_to");
  EXPECT_EQ(msg->domain, opt_str{d});
  EXPECT_EQ(msg->command_type, opt_str{"DebitAccount"});
  EXPECT_EQ(msg->command_id, opt_str{req.command_id.to_string()});
  EXPECT_EQ(msg->correlation_id, opt_str{req.correlation_id->to_string()});
  EXPECT_EQ(msg->data, jsonb_text(env.conn, req.data.text()));
  EXPECT_TRUE(msg->has_reply_to);
  EXPECT_EQ(msg->reply_to, opt_str{d + "__replies"});
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);

  auto audit = read_sent(env.conn, d, req.command_id);
  EXPECT_EQ(audit.count, 1);
  EXPECT_EQ(audit.keys, "batch_id,command_type,correlation_id,msg_id,reply_to");
  EXPECT_EQ(audit.command_type, opt_str{"DebitAccount"});
  EXPECT_EQ(audit.correlation_id, opt_str{req.correlation_id->to_string()});
  EXPECT_EQ(audit.reply_to, opt_str{d + "__replies"});
  EXPECT_EQ(audit.msg_id, opt_str{std::to_string(res.msg_id)});
  EXPECT_FALSE(audit.batch_id);
  EXPECT_EQ(audit.batch_id_type, opt_str{"null"});
}

TEST(BusSend, WithoutReplyToStoresEmptyReplyQueueAndOmitsKey) {
  bus_env env;
  auto d = test::unique_name("bs");
  auto req = make_req(d, "Credit", "{}");
  auto res = env.bus.send(req);
  auto row = read_row(env.conn, d, req.command_id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->reply_queue, "");
  EXPECT_EQ(row->max_attempts, 3);
  auto msg = read_message(env.conn, queue_of(d), res.msg_id);
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->keys, "command_id,command_type,correlation_id,data,domain");
  EXPECT_FALSE(msg->has_reply_to);
  EXPECT_EQ(msg->data, "{}");
  auto audit = read_sent(env.conn, d, req.command_id);
  EXPECT_EQ(audit.count, 1);
  EXPECT_EQ(audit.keys, "batch_id,command_type,correlation_id,msg_id,reply_to");
  EXPECT_FALSE(audit.reply_to); // JSON null
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta);
  EXPECT_FALSE(meta->reply_to);
}

TEST(BusSend, MaxAttemptsGivenDefaultOrZeroFallsBack) {
  bus_env env;
  auto d = test::unique_name("bs");
  auto given = make_req(d);
  given.max_attempts = 7;
  auto unset = make_req(d);
  auto zero = make_req(d);
  zero.max_attempts = 0;
  env.bus.send(given);
  env.bus.send(unset);
  env.bus.send(zero);
  EXPECT_EQ(read_row(env.conn, d, given.command_id)->max_attempts, 7);
  EXPECT_EQ(read_row(env.conn, d, unset.command_id)->max_attempts, 3);
  EXPECT_EQ(read_row(env.conn, d, zero.command_id)->max_attempts, 3);

  // A bus with another default applies it to unset and 0.
  command_bus_options opts;
  opts.default_max_attempts = 9;
  command_bus bus9{env.pool, opts};
  auto unset9 = make_req(d);
  auto zero9 = make_req(d);
  zero9.max_attempts = 0;
  bus9.send(unset9);
  bus9.send(zero9);
  EXPECT_EQ(read_row(env.conn, d, unset9.command_id)->max_attempts, 9);
  EXPECT_EQ(read_row(env.conn, d, zero9.command_id)->max_attempts, 9);
}

TEST(BusSend, ConsecutiveSendsGetIncreasingMsgIds) {
  bus_env env;
  auto d = test::unique_name("bs");
  int64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    auto res = env.bus.send(make_req(d));
    EXPECT_GT(res.msg_id, last);
    last = res.msg_id;
  }
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 5);
  EXPECT_EQ(command_rows(env.conn, d), 5);
  EXPECT_EQ(audit_rows(env.conn, d), 5);
}

TEST(BusSend, RejectsEmptyTypeAndNonObjectDataWithoutWriting) {
  bus_env env;
  auto d = test::unique_name("bs");
  auto no_type = make_req(d, "");
  EXPECT_THROW(env.bus.send(no_type), command_bus_error);
  auto array = make_req(d, "T", "[1,2]");
  EXPECT_THROW(env.bus.send(array), command_bus_error);
  auto null_data = make_req(d, "T", "null");
  EXPECT_THROW(env.bus.send(null_data), command_bus_error);
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
}

// A bus on a pool of one connection must be able to send: send() holds one
// pooled connection while it creates the queue on demand.
TEST(BusSend, WorksWithASingleConnectionPool) {
  bus_env env{1, {}, 1500ms};
  auto d = test::unique_name("bs");
  auto req = make_req(d);
  req.reply_to = d + "__replies";
  send_result res;
  EXPECT_NO_THROW(res = env.bus.send(req));
  EXPECT_TRUE(command_row_exists(env.conn, d, req.command_id));
  auto d3 = test::unique_name("bs");
  EXPECT_NO_THROW(env.bus.send_batch({make_req(d3), make_req(d3)}));
  EXPECT_EQ(command_rows(env.conn, d3), 2);
  std::vector<batch_command> cmds{make_cmd(), make_cmd()};
  auto d2 = test::unique_name("bs");
  EXPECT_NO_THROW(env.bus.create_batch(d2, cmds));
  EXPECT_EQ(command_rows(env.conn, d2), 2);
}

// send() writes the message into the queue's table with a cached plan rather
// than through pgmq.send: the row must be the one pgmq.send(queue, msg, 0)
// writes, and a mixed-case domain must land in PGMQ's lower-case table.
TEST(BusSend, QueueRowIsTheOnePgmqSendWrites) {
  bus_env env;
  auto d = "Mx" + test::unique_name("bs");
  auto queue = queue_of(d);
  auto res = env.bus.send(make_req(d));
  auto by_pgmq =
      env.conn
          .query("SELECT * FROM pgmq.send($1, '{\"k\":1}'::jsonb, 0)", queue)
          .int64(0, 0);
  EXPECT_EQ(by_pgmq, res.msg_id + 1);
  auto table = db::queue_table(queue);
  EXPECT_EQ(table, "q_mx" + d.substr(2) + "__commands");
  auto rows = env.conn.exec(
      "SELECT msg_id, read_ct, headers IS NULL, vt >= enqueued_at, vt <= "
      "clock_timestamp(), enqueued_at <= clock_timestamp() FROM pgmq.\""
      + table + "\" ORDER BY msg_id");
  ASSERT_EQ(rows.rows(), 2);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(rows.int64(i, 1), 0);
    for (int col = 2; col <= 5; ++col)
      EXPECT_TRUE(rows.boolean(i, col)) << rows.column_name(col);
  }
  // Readable under the name as sent, like any pgmq.send message.
  auto read = env.conn.query(
      "SELECT msg_id, message->>'domain' FROM pgmq.read($1, 30, 10)", queue);
  ASSERT_EQ(read.rows(), 2);
  EXPECT_EQ(read.int64(0, 0), res.msg_id);
  EXPECT_EQ(read.text(0, 1), d);
}

// The bus remembers the queues it created. When one is dropped behind its
// back, send fails with the database's error and writes nothing; once the
// queue exists again, the same pooled connection sends to the new table.
TEST(BusSend, DroppedQueueFailsCleanlyAndRecreatedQueueWorks) {
  bus_env env{1};
  auto d = test::unique_name("bs");
  env.bus.send(make_req(d));
  env.conn.query("SELECT pgmq.drop_queue($1)", queue_of(d));
  auto lost = make_req(d);
  try {
    env.bus.send(lost);
    ADD_FAILURE() << "sent to a dropped queue";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "42P01") << e.what();
  }
  EXPECT_FALSE(command_row_exists(env.conn, d, lost.command_id));
  env.conn.query("SELECT pgmq.create($1)", queue_of(d));
  auto again = make_req(d);
  auto res = env.bus.send(again);
  EXPECT_EQ(res.msg_id, 1);
  EXPECT_EQ(messages_for(env.conn, d, again.command_id), 1);
  EXPECT_TRUE(command_row_exists(env.conn, d, again.command_id));
}

// With the default options, a chunk of 100 goes through COPY, one of 99
// through cmdbus_send_commands: the transaction's function statistics tell
// (track_functions is set for the caller's transaction, which the chunk
// joins).
TEST(BusSendBatchPaths, DefaultCopyThresholdIs100) {
  EXPECT_EQ(command_bus_options{}.copy_threshold, 100u);
  bus_env env;
  for (int n : {99, 100}) {
    SCOPED_TRACE(n);
    auto d = test::unique_name("bt");
    std::vector<send_request> reqs;
    for (int i = 0; i < n; ++i)
      reqs.push_back(make_req(d));
    auto conn = test::connect();
    db::transaction tx{conn};
    conn.exec("SET LOCAL track_functions = 'pl'");
    env.bus.send_batch(reqs, conn);
    auto calls = conn.exec("SELECT COALESCE(pg_stat_get_xact_function_calls("
                           "'commandbus.cmdbus_send_commands'::regproc), 0)")
                     .int64(0, 0);
    EXPECT_EQ(calls, n == 100 ? 0 : 1);
    tx.commit();
    EXPECT_EQ(command_rows(env.conn, d), n);
    EXPECT_EQ(queue_length(env.conn, queue_of(d)), n);
  }
}

TEST(BusSend, NotifiesTheCommandQueueOnce) {
  bus_env env;
  auto d = test::unique_name("bn");
  auto listener = test::connect();
  listener.listen(db::notify_channel(queue_of(d)));
  auto req = make_req(d);
  req.reply_to = d + "__replies";
  listener.listen(db::notify_channel(d + "__replies"));
  env.bus.send(req);
  auto got = collect_notifications(listener, 1);
  auto more = listener.wait_for_notifications(300ms);
  got.insert(got.end(), more.begin(), more.end());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "pgmq_notify_" + queue_of(d));
}

// ============================================================================
// reply_to and name validation (PGMQ's queue-name rule, before any SQL)
// ============================================================================

TEST(BusReplyTo, StoredInMessageAndQueueCreatedOnDemand) {
  bus_env env;
  auto d = test::unique_name("bq");
  auto reply = d + "__replies";
  ASSERT_FALSE(queue_exists(env.conn, reply));
  ASSERT_FALSE(queue_exists(env.conn, queue_of(d)));
  auto req = make_req(d);
  req.reply_to = reply;
  auto res = env.bus.send(req);
  EXPECT_TRUE(queue_exists(env.conn, reply));
  EXPECT_TRUE(queue_exists(env.conn, queue_of(d)));
  EXPECT_EQ(queue_length(env.conn, reply), 0);
  EXPECT_EQ(read_row(env.conn, d, req.command_id)->reply_queue, reply);
  EXPECT_EQ(read_message(env.conn, queue_of(d), res.msg_id)->reply_to,
            opt_str{reply});
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->reply_to, opt_str{reply});
}

TEST(BusReplyTo, BoundaryLengthsAreAccepted) {
  bus_env env;
  auto base = test::unique_name("bq");
  auto d = base + std::string(37 - base.size(), 'x'); // queue: 47 chars
  ASSERT_EQ(d.size(), 37u);
  auto reply = base + std::string(47 - base.size(), 'r');
  auto req = make_req(d);
  req.reply_to = reply;
  EXPECT_NO_THROW(env.bus.send(req));
  EXPECT_TRUE(queue_exists(env.conn, d + "__commands"));
  EXPECT_TRUE(queue_exists(env.conn, reply));
  EXPECT_TRUE(command_row_exists(env.conn, d, req.command_id));
}

TEST(BusReplyTo, InvalidReplyToIsRejectedBeforeAnyWrite) {
  bus_env env;
  auto d = test::unique_name("bq");
  std::vector<std::string> bad{"",
                               std::string(48, 'r'),
                               "it's",
                               "q\"x",
                               "a;DROP TABLE commandbus.command",
                               "caf\xc3\xa9",
                               "has space",
                               "has-hyphen",
                               "pgmq.q_x"};
  for (auto& reply : bad) {
    auto req = make_req(d);
    req.reply_to = reply;
    EXPECT_THROW(env.bus.send(req), db::invalid_argument) << reply;
    auto conn = test::connect();
    EXPECT_THROW(env.bus.send(req, conn), db::invalid_argument) << reply;
    EXPECT_THROW(env.bus.send_batch({req}), db::invalid_argument) << reply;
    batch_command c = make_cmd();
    c.reply_to = reply;
    EXPECT_THROW(env.bus.create_batch(d, {c}), db::invalid_argument) << reply;
  }
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_FALSE(queue_exists(env.conn, queue_of(d)));
  EXPECT_FALSE(queue_exists(env.conn, std::string(48, 'r')));
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM commandbus.batch WHERE domain = $1",
                     d)
              .int64(0, 0),
            0);
}

TEST(BusReplyTo, InvalidDomainIsRejectedBeforeAnyWrite) {
  bus_env env;
  std::vector<std::string> bad{"",
                               std::string(38, 'd'),
                               "it's",
                               "semi;colon",
                               "d\xc3\xb6main",
                               "two words",
                               "with-hyphen",
                               "x\"y"};
  for (auto& d : bad) {
    auto req = make_req(d);
    EXPECT_THROW(env.bus.send(req), db::invalid_argument) << d;
    auto conn = test::connect();
    EXPECT_THROW(env.bus.send(req, conn), db::invalid_argument) << d;
    EXPECT_THROW(env.bus.send_batch({req}), db::invalid_argument) << d;
    EXPECT_THROW(env.bus.create_batch(d, {make_cmd()}), db::invalid_argument)
      << d;
    EXPECT_EQ(command_rows(env.conn, d), 0) << d;
    EXPECT_EQ(audit_rows(env.conn, d), 0) << d;
    EXPECT_EQ(env.conn
                .query("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1",
                       d + "__commands")
                .int64(0, 0),
              0)
      << d;
  }
}
