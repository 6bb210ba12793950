// Batches: create_batch writes the batch row and all its commands in one
// transaction; sends name an existing batch or fail without writing; batches
// and their commands are read back, domain-scoped.

#include "tests/db/command_bus_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::test::bus;
using namespace std::chrono_literals;

CMDBUS_BULK_SUITE(BusSendBatchId);
CMDBUS_BULK_SUITE(BusCreateBatch);

// ============================================================================
// batch_id on send
// ============================================================================

TEST_P(BusSendBatchId, UnknownBatchIsRejectedAndNothingWritten) {
  bus_env env;
  auto d = test::unique_name("bb");
  auto req = make_req(d);
  auto batch = uuid::random();
  req.batch_id = batch;
  try {
    env.bus.send(req);
    FAIL() << "expected batch_not_found_error";
  } catch (const batch_not_found_error& e) {
    EXPECT_EQ(e.batch_id().to_string(), batch.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
  // send_batch checks it too.
  EXPECT_THROW(env.bus.send_batch({req}), batch_not_found_error);
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
}

TEST_P(BusSendBatchId, BatchOfAnotherDomainIsNotFound) {
  bus_env env;
  auto d = test::unique_name("bb");
  auto other = test::unique_name("bb");
  auto batch = uuid::random();
  insert_batch_row(env.conn, other, batch);
  auto req = make_req(d);
  req.batch_id = batch;
  EXPECT_THROW(env.bus.send(req), batch_not_found_error);
  EXPECT_EQ(command_rows(env.conn, d), 0);
}

TEST_P(BusSendBatchId, ExistingBatchIsRecordedInRowAndAudit) {
  bus_env env;
  auto d = test::unique_name("bb");
  auto batch = uuid::random();
  insert_batch_row(env.conn, d, batch);
  auto req = make_req(d);
  req.batch_id = batch;
  env.bus.send(req);
  EXPECT_EQ(read_row(env.conn, d, req.command_id)->batch_id,
            opt_str{batch.to_string()});
  auto audit = read_sent(env.conn, d, req.command_id);
  EXPECT_EQ(audit.batch_id, opt_str{batch.to_string()});
  auto meta = env.bus.get_command(d, req.command_id);
  ASSERT_TRUE(meta && meta->batch_id);
  EXPECT_EQ(meta->batch_id->to_string(), batch.to_string());
  // A plain send has none.
  auto plain = make_req(d);
  env.bus.send(plain);
  EXPECT_FALSE(read_row(env.conn, d, plain.command_id)->batch_id);
  EXPECT_FALSE(env.bus.get_command(d, plain.command_id)->batch_id);
}

// An unknown batch in the second domain of a multi-domain chunk is reported
// for that domain, and the whole chunk rolls back.
TEST_P(BusSendBatchId, UnknownBatchErrorNamesItsDomain) {
  bus_env env;
  auto a = test::unique_name("bka"); // sorts before b
  auto b = test::unique_name("bkb");
  auto batch = uuid::random();
  auto in_a = make_req(a);
  auto in_b = make_req(b);
  in_b.batch_id = batch;
  try {
    env.bus.send_batch({in_a, in_b});
    FAIL() << "expected batch_not_found_error";
  } catch (const batch_not_found_error& e) {
    EXPECT_EQ(e.batch_id().to_string(), batch.to_string());
    EXPECT_EQ(e.domain(), b);
  }
  EXPECT_EQ(command_rows(env.conn, a), 0);
  EXPECT_EQ(command_rows(env.conn, b), 0);
}

// ============================================================================
// create_batch
// ============================================================================

TEST_P(BusCreateBatch, StoresBatchCommandsMessagesAndAudits) {
  bus_env env;
  auto d = test::unique_name("bcb");
  std::vector<batch_command> cmds{make_cmd("A", R"({"n":1})"),
                                  make_cmd("B", R"({"n":2})"),
                                  make_cmd("C", R"({"n":3})")};
  cmds[1].max_attempts = 8;
  cmds[2].reply_to = d + "__replies";
  create_batch_options opts;
  opts.batch_id = uuid::random();
  opts.name = "month-end run";
  opts.custom_data = json::parse(R"({"source":"test","n":2})");
  auto listener = test::connect();
  listener.listen(db::notify_channel(queue_of(d)));
  auto res = env.bus.create_batch(d, cmds, opts);
  EXPECT_EQ(res.batch_id.to_string(), opts.batch_id->to_string());
  EXPECT_EQ(res.total_commands, 3);
  ASSERT_EQ(res.command_results.size(), 3u);

  auto batch = env.bus.get_batch(d, res.batch_id);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->domain, d);
  EXPECT_EQ(batch->status, batch_status::pending);
  EXPECT_EQ(batch->batch_type, "COMMAND");
  EXPECT_EQ(batch->total_count, 3);
  EXPECT_EQ(batch->completed_count, 0);
  EXPECT_EQ(batch->failed_count, 0);
  EXPECT_EQ(batch->canceled_count, 0);
  EXPECT_EQ(batch->in_troubleshooting_count, 0);
  EXPECT_EQ(batch->name, opt_str{"month-end run"});
  ASSERT_TRUE(batch->custom_data);
  EXPECT_EQ(jsonb_text(env.conn, batch->custom_data->text()),
            jsonb_text(env.conn, R"({"source":"test","n":2})"));
  EXPECT_FALSE(batch->started_at);
  EXPECT_FALSE(batch->completed_at);
  EXPECT_EQ(env.conn
              .query("SELECT custom_data = $2::jsonb FROM commandbus.batch "
                     "WHERE domain = $1",
                     d, std::string{R"({"n":2,"source":"test"})"})
              .opt_text(0, 0),
            "t");

  for (size_t i = 0; i < cmds.size(); ++i) {
    EXPECT_EQ(res.command_results[i].command_id.to_string(),
              cmds[i].command_id.to_string());
    auto row = read_row(env.conn, d, cmds[i].command_id);
    ASSERT_TRUE(row) << i;
    EXPECT_EQ(row->batch_id, opt_str{res.batch_id.to_string()});
    EXPECT_EQ(row->status, "PENDING");
    EXPECT_EQ(row->command_type, cmds[i].command_type);
    EXPECT_EQ(row->msg_id,
              std::optional<int64_t>{res.command_results[i].msg_id});
    auto msg = read_message(env.conn, queue_of(d), res.command_results[i].msg_id);
    ASSERT_TRUE(msg) << i;
    EXPECT_EQ(msg->command_id, opt_str{cmds[i].command_id.to_string()});
    EXPECT_EQ(msg->domain, opt_str{d});
    EXPECT_EQ(msg->data, jsonb_text(env.conn, cmds[i].data.text()));
    auto audit = read_sent(env.conn, d, cmds[i].command_id);
    EXPECT_EQ(audit.count, 1);
    EXPECT_EQ(audit.batch_id, opt_str{res.batch_id.to_string()});
    EXPECT_EQ(audit.keys,
              "batch_id,command_type,correlation_id,msg_id,reply_to");
  }
  EXPECT_EQ(read_row(env.conn, d, cmds[0].command_id)->max_attempts, 3);
  EXPECT_EQ(read_row(env.conn, d, cmds[1].command_id)->max_attempts, 8);
  EXPECT_EQ(read_row(env.conn, d, cmds[2].command_id)->reply_queue,
            d + "__replies");
  EXPECT_TRUE(queue_exists(env.conn, d + "__replies"));
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 3);
  auto got = collect_notifications(listener, 1);
  auto more = listener.wait_for_notifications(300ms);
  got.insert(got.end(), more.begin(), more.end());
  EXPECT_EQ(got.size(), 1u);
}

TEST_P(BusCreateBatch, GeneratesBatchIdWhenNoneGiven) {
  bus_env env;
  auto d = test::unique_name("bcb");
  auto r1 = env.bus.create_batch(d, {make_cmd()});
  auto r2 = env.bus.create_batch(d, {make_cmd()});
  EXPECT_FALSE(r1.batch_id.is_nil());
  EXPECT_NE(r1.batch_id.to_string(), r2.batch_id.to_string());
  auto b = env.bus.get_batch(d, r1.batch_id);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->total_count, 1);
  EXPECT_FALSE(b->name);
  EXPECT_FALSE(b->custom_data);
}

TEST_P(BusCreateBatch, DuplicateWithinListRollsBackEverything) {
  bus_env env;
  auto d = test::unique_name("bcb");
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  cmds[2].command_id = cmds[0].command_id;
  create_batch_options opts;
  opts.batch_id = uuid::random();
  try {
    env.bus.create_batch(d, cmds, opts);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), cmds[0].command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_FALSE(env.bus.get_batch(d, *opts.batch_id));
  EXPECT_EQ(command_rows(env.conn, d), 0);
  EXPECT_EQ(audit_rows(env.conn, d), 0);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 0);
}

TEST_P(BusCreateBatch, DuplicateAgainstDatabaseRollsBackEverything) {
  bus_env env;
  auto d = test::unique_name("bcb");
  auto existing = make_req(d);
  env.bus.send(existing);
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  cmds[1].command_id = existing.command_id;
  create_batch_options opts;
  opts.batch_id = uuid::random();
  try {
    env.bus.create_batch(d, cmds, opts);
    FAIL() << "expected duplicate_command_error";
  } catch (const duplicate_command_error& e) {
    EXPECT_EQ(e.command_id().to_string(), existing.command_id.to_string());
    EXPECT_EQ(e.domain(), d);
  }
  EXPECT_FALSE(env.bus.get_batch(d, *opts.batch_id));
  EXPECT_EQ(command_rows(env.conn, d), 1);
  EXPECT_FALSE(command_row_exists(env.conn, d, cmds[0].command_id));
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 1);
  EXPECT_EQ(audit_rows(env.conn, d), 1);
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM commandbus.batch WHERE domain = $1",
                     d)
              .int64(0, 0),
            0);
}

TEST_P(BusCreateBatch, EmptyListIsAnError) {
  bus_env env;
  auto d = test::unique_name("bcb");
  EXPECT_THROW(env.bus.create_batch(d, {}), command_bus_error);
  auto conn = test::connect();
  EXPECT_THROW(env.bus.create_batch(d, {}, {}, conn), command_bus_error);
  EXPECT_EQ(env.conn
              .query("SELECT count(*) FROM commandbus.batch WHERE domain = $1",
                     d)
              .int64(0, 0),
            0);
}

TEST_P(BusCreateBatch, ExistingBatchIdIsAnErrorAndNothingWritten) {
  bus_env env;
  auto d = test::unique_name("bcb");
  auto first = env.bus.create_batch(d, {make_cmd(), make_cmd()});
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  create_batch_options opts;
  opts.batch_id = first.batch_id;
  opts.name = "again";
  bool duplicate_command = false;
  try {
    env.bus.create_batch(d, cmds, opts);
    FAIL() << "expected command_bus_error";
  } catch (const duplicate_command_error&) {
    duplicate_command = true;
  } catch (const command_bus_error& e) {
    EXPECT_NE(std::string{e.what()}.find(first.batch_id.to_string()),
              std::string::npos)
      << e.what();
  }
  EXPECT_FALSE(duplicate_command) << "an existing batch is not a duplicate "
                                     "command";
  auto b = env.bus.get_batch(d, first.batch_id);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->total_count, 2);
  EXPECT_FALSE(b->name);
  EXPECT_EQ(command_rows(env.conn, d), 2);
  EXPECT_EQ(queue_length(env.conn, queue_of(d)), 2);
  EXPECT_EQ(audit_rows(env.conn, d), 2);
  for (auto& c : cmds)
    EXPECT_FALSE(command_row_exists(env.conn, d, c.command_id));
}

TEST_P(BusCreateBatch, GetBatchIsDomainScopedAndNulloptForUnknown) {
  bus_env env;
  auto d = test::unique_name("bcb");
  auto other = test::unique_name("bcb");
  auto res = env.bus.create_batch(d, {make_cmd()});
  EXPECT_TRUE(env.bus.get_batch(d, res.batch_id));
  EXPECT_FALSE(env.bus.get_batch(other, res.batch_id));
  EXPECT_FALSE(env.bus.get_batch(d, uuid::random()));
}

TEST_P(BusCreateBatch, ListBatchesFiltersPagesAndScopes) {
  bus_env env;
  auto d = test::unique_name("bcl");
  auto other = test::unique_name("bcl");
  std::vector<uuid> ids;
  for (int i = 0; i < 3; ++i) {
    create_batch_options o;
    o.name = "batch " + std::to_string(i);
    ids.push_back(env.bus.create_batch(d, {make_cmd()}, o).batch_id);
    env.conn.query("UPDATE commandbus.batch SET created_at = $3::timestamptz "
                   "WHERE domain = $1 AND batch_id = $2::uuid",
                   d, ids.back().to_string(),
                   "2001-02-03 04:05:0" + std::to_string(i + 1) + "+00");
  }
  env.bus.create_batch(other, {make_cmd()});
  env.conn.query("UPDATE commandbus.batch SET status = 'COMPLETED' WHERE "
                 "domain = $1 AND batch_id = $2::uuid",
                 d, ids[1].to_string());
  auto names = [](const std::vector<batch_metadata>& xs) {
    std::vector<std::string> out;
    for (auto& x : xs)
      out.push_back(x.name.value_or("?"));
    return out;
  };
  using v = std::vector<std::string>;
  EXPECT_EQ(names(env.bus.list_batches(d)),
            (v{"batch 2", "batch 1", "batch 0"}));
  EXPECT_EQ(names(env.bus.list_batches(d, batch_status::completed)),
            (v{"batch 1"}));
  EXPECT_EQ(names(env.bus.list_batches(d, batch_status::pending)),
            (v{"batch 2", "batch 0"}));
  EXPECT_TRUE(env.bus.list_batches(d, batch_status::in_progress).empty());
  EXPECT_EQ(names(env.bus.list_batches(d, std::nullopt, 1, 1)), (v{"batch 1"}));
  EXPECT_EQ(names(env.bus.list_batches(d, std::nullopt, 2, 0)),
            (v{"batch 2", "batch 1"}));
  EXPECT_TRUE(env.bus.list_batches(d, std::nullopt, 10, 3).empty());
  EXPECT_EQ(env.bus.list_batches(other).size(), 1u);
  EXPECT_TRUE(env.bus.list_batches(test::unique_name("bcl")).empty());
  auto first = env.bus.list_batches(d, batch_status::completed);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].batch_id.to_string(), ids[1].to_string());
  EXPECT_EQ(first[0].status, batch_status::completed);
}

TEST_P(BusCreateBatch, ListBatchCommandsFiltersAndEmptyForUnknown) {
  bus_env env;
  auto d = test::unique_name("bcc");
  std::vector<batch_command> cmds{make_cmd(), make_cmd(), make_cmd()};
  auto res = env.bus.create_batch(d, cmds);
  auto other = env.bus.create_batch(d, {make_cmd()});
  env.bus.send(make_req(d)); // not in a batch
  auto all = env.bus.list_batch_commands(d, res.batch_id);
  ASSERT_EQ(all.size(), 3u);
  std::set<std::string> expected, got;
  for (auto& c : cmds)
    expected.insert(c.command_id.to_string());
  for (auto& m : all) {
    got.insert(m.command_id.to_string());
    ASSERT_TRUE(m.batch_id);
    EXPECT_EQ(m.batch_id->to_string(), res.batch_id.to_string());
  }
  EXPECT_EQ(got, expected);
  set_status(env.conn, d, cmds[1].command_id, "COMPLETED");
  auto done = env.bus.list_batch_commands(d, res.batch_id,
                                          command_status::completed);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].command_id.to_string(), cmds[1].command_id.to_string());
  EXPECT_EQ(done[0].status, command_status::completed);
  EXPECT_EQ(env.bus.list_batch_commands(d, res.batch_id, command_status::pending)
              .size(),
            2u);
  EXPECT_EQ(env.bus.list_batch_commands(d, res.batch_id, std::nullopt, 2, 0)
              .size(),
            2u);
  EXPECT_EQ(env.bus.list_batch_commands(d, res.batch_id, std::nullopt, 2, 2)
              .size(),
            1u);
  EXPECT_EQ(env.bus.list_batch_commands(d, other.batch_id).size(), 1u);
  EXPECT_TRUE(env.bus.list_batch_commands(d, uuid::random()).empty());
  EXPECT_TRUE(
    env.bus.list_batch_commands(test::unique_name("bcc"), res.batch_id).empty());
}
