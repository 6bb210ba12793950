// command_bus::send_batch: chunks of one transaction each, in input order,
// grouped by domain, one NOTIFY per queue per chunk, on both bulk write
// paths (INSERT statements and COPY), sequential and parallel.

#include "tests/db/command_bus_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test::bus;
using namespace std::chrono_literals;

CMDBUS_BULK_SUITE(BusSendBatch);

// ============================================================================
// send_batch
// ============================================================================

TEST_P(BusSendBatch, ChunksKeepInputOrderAndPairMsgIds) {
  bus_env env{4, chunked(10)};
  auto d = test::unique_name("bsb");
  std::vector<send_request> reqs;
  for (int i = 0; i < 25; ++i)
    reqs.push_back(make_req(d, "T" + std::to_string(i % 3),
                            "{\"i\":" + std::to_string(i) + "}"));
  reqs[3].reply_to = d + "__replies";
  reqs[4].max_attempts = 6;
  auto res = env.bus.send_batch(reqs);
  EXPECT_EQ(res.chunks_processed, 3);
  EXPECT_EQ(res.total_commands, 25);
  ASSERT_EQ(res.results.size(), 25u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(res.results[i].command_id.to_string(),
              reqs[i].command_id.to_string());
    if (i > 0) {
      EXPECT_GT(res.results[i].msg_id, res.results[i - 1].msg_id) << i;
    }
    // The returned msg_id is the row's and carries this command.
    auto row = read_row(env.conn, d, reqs[i].command_id);
    ASSERT_TRUE(row) << i;
    EXPECT_EQ(row->msg_id, std::optional<int64_t>{res.results[i].msg_id});
    EXPECT_EQ(row->status, "PENDING");
    EXPECT_EQ(row->attempts, 0);
    EXPECT_EQ(row->command_type, reqs[i].command_type);
    auto msg = read_message(env.conn, queue_of(d), res.results[i].msg_id);
    ASSERT_TRUE(msg) << i;
    EXPECT_EQ(msg->command_id, opt_str{reqs[i].command_id.to_string()});
    EXPECT_EQ(msg->data, jsonb_text(env.conn, reqs[i].data.text()));
    auto audit = read_sent(env.conn, d, reqs[i].command_id);
    EXPECT_EQ(audit.count, 1);
    EXPECT_EQ(audit.msg_id, opt_str{std::to_string(res.results[i].msg_id)});
    // send_batch without batch_id: no batch_id key (reference).
    EXPECT_EQ(audit.keys, "command_type,correlation_id,msg_id,reply_to");
  }
  auto r3 = read_row(env.conn, d, reqs[3].command_id);
  EXPECT_EQ(r3->reply_queue, d + "__replies");
  EXPECT_EQ(read_message(env.conn, queue_of(d), res.results[3].msg_id)->reply_to,
            opt_str{d + "__replies"});
  EXPECT_TRUE(queue_exists(env.conn, d + "__replies"));
  EXPECT_FALSE(read_message(env.conn, queue_of(d), res.results[2].msg_id)
                 ->has_reply_to);
  EXPECT_EQ(read_row(env.conn, d, reqs[4].command_id)->max_attempts, 6);
  EXPECT_EQ(read_row(env.conn, d, reqs[5].command_id)->max_attempts, 3);
  EXPECT_EQ(command_rows(env.conn, d), 25);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 25);
  EXPECT_EQ(audit_rows(env.conn, d), 25);
}

TEST_P(BusSendBatch, ExactMultipleOfChunkSize) {
  bus_env env{4, chunked(5)};
  auto d = test::unique_name("bsb");
  std::vector<send_request> reqs;
  for (int i = 0; i < 10; ++i)
    reqs.push_back(make_req(d));
  auto res = env.bus.send_batch(reqs);
  EXPECT_EQ(res.chunks_processed, 2);
  EXPECT_EQ(res.total_commands, 10);
  EXPECT_EQ(command_rows(env.conn, d), 10);
}

TEST_P(BusSendBatch, MultipleDomainsInOneCall) {
  bus_env env;
  auto a = test::unique_name("bsa");
  auto b = test::unique_name("bsb");
  std::vector<send_request> reqs;
  for (int i = 0; i < 8; ++i)
    reqs.push_back(make_req(i % 2 == 0 ? b : a)); // b first on purpose
  auto res = env.bus.send_batch(reqs);
  EXPECT_EQ(res.chunks_processed, 1);
  EXPECT_EQ(res.total_commands, 8);
  ASSERT_EQ(res.results.size(), 8u);
  int64_t last_a = 0, last_b = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(res.results[i].command_id.to_string(),
              reqs[i].command_id.to_string());
    auto& last = reqs[i].domain == a ? last_a : last_b;
    EXPECT_GT(res.results[i].msg_id, last) << i;
    last = res.results[i].msg_id;
    auto msg = read_message(env.conn, queue_of(reqs[i].domain),
                            res.results[i].msg_id);
    ASSERT_TRUE(msg) << i;
    EXPECT_EQ(msg->command_id, opt_str{reqs[i].command_id.to_string()});
    EXPECT_EQ(msg->domain, opt_str{reqs[i].domain});
    EXPECT_EQ(read_row(env.conn, reqs[i].domain, reqs[i].command_id)->queue_name,
              queue_of(reqs[i].domain));
  }
  EXPECT_EQ(command_rows(env.conn, a), 4);
  EXPECT_EQ(command_rows(env.conn, b), 4);
  EXPECT_EQ(queue_length(env.conn, queue_of(a)), 4);
  EXPECT_EQ(queue_length(env.conn, queue_of(b)), 4);
  EXPECT_EQ(audit_rows(env.conn, a), 4);
  EXPECT_EQ(audit_rows(env.conn, b), 4);
}

TEST_P(BusSendBatch, OneTransactionPerChunk) {
  bus_env env{4, chunked(10)};
  auto d = test::unique_name("bsb");
  auto existing = make_req(d);
  env.bus.send(existing);
  std::vector<send_request> reqs;
  for (int i = 0; i < 25; ++i)
    reqs.push_back(make_req(d));
  reqs[14].command_id = existing.command_id; // in chunk 2
  try {
    env.bus.send_batch(reqs);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  // Chunk 1 committed, chunk 2 entirely absent, chunk 3 never sent.
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i == 14)
      continue;
    EXPECT_EQ(command_row_exists(env.conn, d, reqs[i].command_id), i < 10) << i;
    EXPECT_EQ(messages_for(env.conn, d, reqs[i].command_id), i < 10 ? 1 : 0)
      << i;
  }
  EXPECT_EQ(command_rows(env.conn, d), 11);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 11);
  EXPECT_EQ(audit_rows(env.conn, d), 11);
  EXPECT_EQ(messages_for(env.conn, d, existing.command_id), 1);
}

TEST_P(BusSendBatch, DuplicatesWithinInputRejectedBeforeAnyWrite) {
  bus_env env{4, chunked(2)};
  auto d = test::unique_name("bsb");
  std::vector<send_request> reqs{make_req(d), make_req(d), make_req(d),
                                 make_req(d), make_req(d)};
  reqs[4].command_id = reqs[0].command_id; // would be in chunk 3
  try {
    env.bus.send_batch(reqs);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), reqs[0].command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  // The same id in two domains is not a duplicate.
  auto other = test::unique_name("bsb");
  auto twin = make_req(other);
  twin.command_id = reqs[0].command_id;
  auto res = env.bus.send_batch({reqs[0], twin});
  EXPECT_EQ(res.total_commands, 2);
  EXPECT_TRUE(command_row_exists(env.conn, d, reqs[0].command_id));
  EXPECT_TRUE(command_row_exists(env.conn, other, reqs[0].command_id));
}

// With the same command id in two domains of one chunk, a duplicate in the
// second domain must be reported for that domain, and the chunk rolls back.
TEST_P(BusSendBatch, DuplicateErrorNamesTheDomainThatHasIt) {
  bus_env env;
  auto a = test::unique_name("bda"); // sorts before b
  auto b = test::unique_name("bdb");
  auto existing = make_req(b);
  env.bus.send(existing);
  auto in_a = make_req(a);
  in_a.command_id = existing.command_id;
  auto in_b = make_req(b);
  in_b.command_id = existing.command_id;
  try {
    env.bus.send_batch({in_a, in_b});
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
    EXPECT_EQ(e.domain(), b);
  }
  EXPECT_EQ(command_rows(env.conn, a), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(a)), 0);
  EXPECT_EQ(command_rows(env.conn, b), 1);
}

TEST_P(BusSendBatch, EmptyInputSendsNothing) {
  bus_env env;
  auto res = env.bus.send_batch({});
  EXPECT_TRUE(res.results.empty());
  EXPECT_EQ(res.chunks_processed, 0);
  EXPECT_EQ(res.total_commands, 0);
  auto conn = test::connect();
  auto res2 = env.bus.send_batch({}, conn);
  EXPECT_TRUE(res2.results.empty());
  EXPECT_EQ(res2.chunks_processed, 0);
  EXPECT_EQ(res2.total_commands, 0);
}

TEST_P(BusSendBatch, KeepsBatchIdWhenGiven) {
  bus_env env;
  auto d = test::unique_name("bsb");
  auto batch = uuid::random();
  insert_batch_row(env.conn, d, batch);
  auto with = make_req(d);
  with.batch_id = batch;
  auto without = make_req(d);
  env.bus.send_batch({with, without});
  EXPECT_EQ(read_row(env.conn, d, with.command_id)->batch_id,
            opt_str{batch.to_string()});
  EXPECT_EQ(read_sent(env.conn, d, with.command_id).batch_id,
            opt_str{batch.to_string()});
  EXPECT_FALSE(read_row(env.conn, d, without.command_id)->batch_id);
  EXPECT_FALSE(read_sent(env.conn, d, without.command_id).batch_id_type);
}

TEST_P(BusSendBatch, OneNotificationPerQueuePerChunk) {
  bus_env env{4, chunked(10)};
  auto a = test::unique_name("bna");
  auto b = test::unique_name("bnb");
  auto listener = test::connect();
  listener.listen(db::notify_channel(queue_of(a)));
  listener.listen(db::notify_channel(queue_of(b)));
  std::vector<send_request> reqs;
  for (int i = 0; i < 25; ++i)
    reqs.push_back(make_req(a));
  auto res = env.bus.send_batch(reqs);
  ASSERT_EQ(res.chunks_processed, 3);
  auto got = collect_notifications(listener, 3);
  EXPECT_EQ(count_of(got, "pgmq_notify_" + queue_of(a)), 3u);
  got = listener.wait_for_notifications(300ms);
  EXPECT_TRUE(got.empty()) << got.size() << " extra notification(s)";

  // One chunk with two domains: one notification per queue.
  std::vector<send_request> mixed;
  for (int i = 0; i < 6; ++i)
    mixed.push_back(make_req(i % 2 ? a : b));
  env.bus.send_batch(mixed);
  got = collect_notifications(listener, 2);
  auto more = listener.wait_for_notifications(300ms);
  got.insert(got.end(), more.begin(), more.end());
  EXPECT_EQ(count_of(got, "pgmq_notify_" + queue_of(a)), 1u);
  EXPECT_EQ(count_of(got, "pgmq_notify_" + queue_of(b)), 1u);
  EXPECT_EQ(got.size(), 2u);
}

// Text that needs escaping on its way (JSON, array literal or COPY) is
// stored exactly: the command type in the row, message and audit, and the
// data's strings.
TEST_P(BusSendBatch, TextNeedingEscapesIsStoredExactly) {
  bus_env env;
  auto d = test::unique_name("bb");
  std::string type = "Debit\tnew\nline\r\\back \"q\" {a,b} NULL \xc3\xa9";
  auto req = make_req(
      d, type, R"({"memo":"tab\tnl\nbs\\ q\" \\N \u00e9","n":[1,{"k":null}]})");
  auto plain = make_req(d);
  auto res = env.bus.send_batch({req, plain});
  ASSERT_EQ(res.results.size(), 2u);
  auto row = read_row(env.conn, d, req.command_id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->command_type, type);
  auto msg = read_message(env.conn, queue_of(d), res.results[0].msg_id);
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->command_type, opt_str{type});
  EXPECT_EQ(msg->data, jsonb_text(env.conn, req.data.text()));
  EXPECT_EQ(env.conn
                .query("SELECT message->'data'->>'memo' FROM pgmq.q_"
                           + queue_of(d) + " WHERE msg_id = $1::bigint",
                       res.results[0].msg_id)
                .opt_text(0, 0),
            "tab\tnl\nbs\\ q\" \\N \xc3\xa9");
  EXPECT_EQ(read_sent(env.conn, d, req.command_id).command_type, opt_str{type});
  EXPECT_EQ(read_row(env.conn, d, plain.command_id)->command_type,
            "DebitAccount");
}

// The queue rows are those pgmq.send_batch writes: ids in input order and
// drawn from the queue's sequence (a later pgmq.send continues after them),
// visible at once, unread, without headers.
TEST_P(BusSendBatch, MixedCaseDomainUsesPgmqsTable) {
  bus_env env;
  auto d = "MiXed" + test::unique_name("bb");
  std::vector<send_request> reqs{make_req(d), make_req(d), make_req(d)};
  auto res = env.bus.send_batch(reqs);
  auto read = env.conn.query(
      "SELECT msg_id, message->>'domain' FROM pgmq.read($1, 30, 10)",
      queue_of(d));
  ASSERT_EQ(read.rows(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(read.int64(i, 0), res.results[static_cast<size_t>(i)].msg_id);
    EXPECT_EQ(read.text(i, 1), d);
  }
  EXPECT_EQ(command_rows(env.conn, d), 3);
  EXPECT_EQ(audit_rows(env.conn, d), 3);
}

TEST_P(BusSendBatch, QueueRowsAreThoseOfPgmqSendBatch) {
  bus_env env;
  auto d = test::unique_name("bb");
  std::vector<send_request> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(make_req(d));
  auto res = env.bus.send_batch(reqs);
  for (size_t i = 1; i < res.results.size(); ++i)
    EXPECT_GT(res.results[i].msg_id, res.results[i - 1].msg_id);
  auto next =
      env.conn.query("SELECT * FROM pgmq.send($1, '{}'::jsonb, 0)", queue_of(d))
          .int64(0, 0);
  EXPECT_GT(next, res.results.back().msg_id);
  auto rows = env.conn.exec(
      "SELECT count(*), bool_and(read_ct = 0), bool_and(headers IS NULL), "
      "bool_and(vt >= enqueued_at AND vt <= clock_timestamp()) FROM pgmq.q_"
      + queue_of(d));
  EXPECT_EQ(rows.int64(0, 0), 6);
  EXPECT_TRUE(rows.boolean(0, 1));
  EXPECT_TRUE(rows.boolean(0, 2));
  EXPECT_TRUE(rows.boolean(0, 3));
  auto read = env.conn.query(
      "SELECT msg_id, message->>'command_id' FROM pgmq.read($1, 30, 10)",
      queue_of(d));
  ASSERT_EQ(read.rows(), 6);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(read.int64(i, 0), res.results[static_cast<size_t>(i)].msg_id);
    EXPECT_EQ(read.text(i, 1),
              reqs[static_cast<size_t>(i)].command_id.to_string());
  }
}

TEST_P(BusSendBatch, ParallelChunksKeepInputOrder) {
  command_bus_options opts;
  opts.chunk_size = 4;
  opts.parallel_chunks = 3;
  bus_env env{4, opts};
  auto d = test::unique_name("bsp");
  std::vector<send_request> reqs;
  for (int i = 0; i < 22; ++i)
    reqs.push_back(make_req(d));
  auto res = env.bus.send_batch(reqs);
  EXPECT_EQ(res.chunks_processed, 6);
  EXPECT_EQ(res.total_commands, 22);
  ASSERT_EQ(res.results.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(res.results[i].command_id.to_string(),
              reqs[i].command_id.to_string());
    auto msg = read_message(env.conn, queue_of(d), res.results[i].msg_id);
    ASSERT_TRUE(msg) << i;
    EXPECT_EQ(msg->command_id, opt_str{reqs[i].command_id.to_string()});
  }
  EXPECT_EQ(command_rows(env.conn, d), 22);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 22);
}

TEST_P(BusSendBatch, ParallelChunkFailureCommitsWholeChunksOnly) {
  // A duplicate in the second of six chunks, two at once: the call fails
  // naming it, the failing chunk wrote nothing and the others committed
  // whole or not at all (which ones ran beside it depends on timing).
  command_bus_options opts;
  opts.chunk_size = 4;
  opts.parallel_chunks = 2;
  bus_env env{4, opts};
  auto d = test::unique_name("bsf");
  std::vector<send_request> reqs;
  for (int i = 0; i < 24; ++i)
    reqs.push_back(make_req(d));
  auto existing = reqs[5];
  env.bus.send(existing);
  try {
    env.bus.send_batch(reqs);
    FAIL() << "the duplicate was not reported";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
  }
  auto sent = command_rows(env.conn, d) - 1;
  EXPECT_EQ(sent % 4, 0) << sent;
  EXPECT_LE(sent, 20);
  for (int i = 4; i < 8; ++i) {
    if (i != 5) {
      EXPECT_FALSE(command_row_exists(env.conn, d,
                                      reqs[static_cast<size_t>(i)].command_id))
        << i;
    }
  }
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), sent + 1);
  EXPECT_EQ(audit_rows(env.conn, d), sent + 1);
}

// Two send_batch calls race on the same new command id: the loser fails on
// the unique index (23505) and must name the command that is the duplicate.
TEST_P(BusSendBatch, RacingDuplicateNamesTheDuplicateCommand) {
  bus_env env;
  auto d = test::unique_name("bsr");
  auto shared = make_req(d);
  auto first_a = make_req(d);
  auto first_b = make_req(d);
  env.bus.ensure_queue(queue_of(d));
  auto holder = test::connect();
  db::transaction tx{holder};
  env.bus.send_batch({first_a, shared}, holder); // uncommitted
  std::optional<uuid> dup_id;
  std::string dup_domain, other;
  std::thread loser{[&] {
    try {
      env.bus.send_batch({first_b, shared});
      other = "no error";
    } catch (const duplicate_command_error& e) {
      dup_id = e.command_id();
      dup_domain = e.domain();
    } catch (const std::exception& e) {
      other = e.what();
    }
  }};
  // Wait (bounded, by polling the server) until the loser blocks on the
  // holder's uncommitted row.
  bool blocked = false;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!blocked && std::chrono::steady_clock::now() < deadline)
    blocked = env.conn
                .query("SELECT count(*) FROM pg_stat_activity WHERE "
                       "pg_blocking_pids(pid) @> ARRAY[$1::int]",
                       holder.backend_pid())
                .int64(0, 0)
              > 0;
  EXPECT_TRUE(blocked);
  tx.commit();
  loser.join();
  EXPECT_EQ(other, "");
  ASSERT_TRUE(dup_id);
  EXPECT_EQ(dup_id->to_string(), shared.command_id.to_string());
  EXPECT_EQ(dup_domain, d);
  EXPECT_FALSE(command_row_exists(env.conn, d, first_b.command_id));
  EXPECT_EQ(command_rows(env.conn, d), 2);
}

// Invalid input anywhere in the list writes nothing, also on the caller's
// connection (there each chunk would otherwise run before the next chunk is
// validated; without a caller transaction those statements commit).
TEST_P(BusSendBatch, InvalidRequestInLaterChunkWritesNothing) {
  bus_env env{4, chunked(2)};
  auto d = test::unique_name("bsi");
  std::vector<send_request> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(make_req(d));
  reqs[4].reply_to = "bad-queue";
  EXPECT_THROW(env.bus.send_batch(reqs), db::invalid_argument);
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  auto conn = test::connect();
  EXPECT_THROW(env.bus.send_batch(reqs, conn), db::invalid_argument);
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  // An empty command_type in the last chunk (fresh domain and ids).
  auto d2 = test::unique_name("bsi");
  std::vector<send_request> more;
  for (int i = 0; i < 5; ++i)
    more.push_back(make_req(d2));
  more[4].command_type = "";
  EXPECT_THROW(env.bus.send_batch(more, conn), command_bus_error);
  EXPECT_EQ(command_rows(env.conn, d2), 0);
}
