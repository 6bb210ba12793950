// Listing, counting and showing the troubleshooting queue
// (db/troubleshooting.hpp), the reference library's list/count scenarios.

#include "tests/db/tsq_support.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

using TsqList = TsqTest;

TEST_F(TsqList, EmptyDomainListsAndCountsNothing) {
  tsq_filter f;
  f.domain = d;
  EXPECT_TRUE(tsq.list(f).empty());
  EXPECT_EQ(tsq.count(f), 0);
  // A domain whose queue (and archive) was never created: also empty.
  f.domain = unique_name("noqueue");
  EXPECT_TRUE(tsq.list(f).empty());
  EXPECT_EQ(tsq.count(f), 0);
}

TEST_F(TsqList, ListsAPermanentItemWithItsArchivedPayload) {
  park_spec spec;
  spec.data = R"({"amount":42,"note":"x"})";
  auto id = park(spec);
  // A command that is not in the TSQ is not listed.
  env.bus.send(make_req(d));
  tsq_filter f;
  f.domain = d;
  auto items = tsq.list(f);
  ASSERT_EQ(items.size(), 1u);
  auto& x = items[0];
  EXPECT_EQ(x.command_id, id);
  EXPECT_EQ(x.domain, d);
  EXPECT_EQ(x.command_type, "DebitAccount");
  EXPECT_EQ(x.status, command_status::in_troubleshooting_queue);
  EXPECT_EQ(x.attempts, 1);
  EXPECT_EQ(x.max_attempts, 3);
  EXPECT_EQ(x.last_error_type, opt_str{"PERMANENT"});
  EXPECT_EQ(x.last_error_code, opt_str{"BAD_INPUT"});
  EXPECT_EQ(x.last_error_msg, opt_str{"bad input"});
  EXPECT_FALSE(x.batch_id);
  ASSERT_TRUE(x.payload);
  EXPECT_TRUE(jeq(conn, x.payload->text(), "{data}", spec.data));
  EXPECT_EQ(jget(conn, x.payload->text(), "{command_id}"),
            opt_str{id.to_string()});
  EXPECT_EQ(tsq.count(f), 1);
}

TEST_F(TsqList, ListsAnExhaustedItem) {
  park_spec spec;
  spec.exhausted = true;
  spec.error_code = "TIMEOUT";
  auto id = park(spec);
  tsq_filter f;
  f.domain = d;
  auto items = tsq.list(f);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].command_id, id);
  EXPECT_EQ(items[0].attempts, 2);
  EXPECT_EQ(items[0].max_attempts, 2);
  EXPECT_EQ(items[0].last_error_type, opt_str{"TRANSIENT"});
  EXPECT_EQ(items[0].last_error_code, opt_str{"TIMEOUT"});
  ASSERT_TRUE(items[0].payload);
}

TEST_F(TsqList, KeepsCorrelationIdAndReplyTo) {
  park_spec spec;
  spec.reply_to = replies;
  spec.correlation_id = uuid::random();
  auto id = park(spec);
  tsq_filter f;
  f.domain = d;
  auto items = tsq.list(f);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].command_id, id);
  EXPECT_EQ(items[0].correlation_id, spec.correlation_id);
  EXPECT_EQ(items[0].reply_to, opt_str{replies});
  EXPECT_EQ(jget(conn, items[0].payload->text(), "{reply_to}"),
            opt_str{replies});
}

TEST_F(TsqList, FiltersByTypeErrorCodeAndBatch) {
  park_spec a;
  a.type = "TypeA";
  park_spec b;
  b.type = "TypeB";
  b.error_code = "OTHER";
  auto a1 = park(a);
  auto a2 = park(a);
  auto b1 = park(b);
  tsq_filter f;
  f.domain = d;
  f.command_type = "TypeA";
  EXPECT_EQ(tsq.count(f), 2);
  auto ids = listed(f);
  EXPECT_EQ(ids.size(), 2u);
  f.command_type = "TypeB";
  EXPECT_EQ(listed(f), (strings{b1.to_string()}));
  EXPECT_EQ(tsq.count(f), 1);
  f.command_type.reset();
  f.error_code = "OTHER";
  EXPECT_EQ(listed(f), (strings{b1.to_string()}));
  f.error_code = "BAD_INPUT";
  EXPECT_EQ(tsq.count(f), 2);
  f.error_code.reset();
  EXPECT_EQ(tsq.count(f), 3);

  auto batch = make_batch(2);
  to_tsq(d, batch.command_results[0].command_id, {}, batch.batch_id);
  f.batch_id = batch.batch_id;
  EXPECT_EQ(listed(f),
            (strings{batch.command_results[0].command_id.to_string()}));
  auto items = tsq.list(f);
  EXPECT_EQ(items[0].batch_id, batch.batch_id);
  (void) a1;
  (void) a2;
}

TEST_F(TsqList, PaginatesNewestFirstOrOldestFirst) {
  std::vector<uuid> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(park());
  // Distinct times in the TSQ: the i-th moved there i minutes before now.
  for (int i = 0; i < 5; ++i)
    conn.query("UPDATE commandbus.command SET updated_at = NOW() - "
               "make_interval(mins => $3::int) WHERE domain = $1 AND "
               "command_id = $2::uuid",
               d, ids[i].to_string(), 5 - i);
  tsq_filter f;
  f.limit = 2;
  EXPECT_EQ(listed(f), (strings{ids[4].to_string(), ids[3].to_string()}));
  f.offset = 2;
  EXPECT_EQ(listed(f), (strings{ids[2].to_string(), ids[1].to_string()}));
  f.offset = 4;
  EXPECT_EQ(listed(f), (strings{ids[0].to_string()}));
  f.offset = 0;
  f.oldest_first = true;
  EXPECT_EQ(listed(f), (strings{ids[0].to_string(), ids[1].to_string()}));
  f.domain = d;
  EXPECT_EQ(tsq.count(f), 5);
  // older_than: updated_at further back than 150 s: the first three.
  f.limit = 50;
  f.older_than = std::chrono::seconds{150};
  EXPECT_EQ(listed(f), (strings{ids[0].to_string(), ids[1].to_string(),
                                ids[2].to_string()}));
}

TEST_F(TsqList, GetShowsTheErrorsOfEveryAttempt) {
  park_spec spec;
  spec.exhausted = true;
  spec.error_code = "TIMEOUT";
  auto id = park(spec);
  auto x = tsq.get(d, id);
  EXPECT_EQ(x.item.command_id, id);
  ASSERT_TRUE(x.item.payload);
  ASSERT_EQ(x.errors.size(), 2u);
  EXPECT_EQ(x.errors[0].event_type, "FAILED");
  EXPECT_EQ(x.errors[0].attempt, 1);
  EXPECT_EQ(x.errors[0].error_type, opt_str{"TRANSIENT"});
  EXPECT_EQ(x.errors[0].error_code, opt_str{"TIMEOUT"});
  EXPECT_EQ(x.errors[0].error_msg, opt_str{"timed out"});
  EXPECT_EQ(x.errors[1].event_type, "MOVED_TO_TSQ");
  EXPECT_EQ(x.errors[1].attempt, 2);
  EXPECT_EQ(x.errors[1].reason, opt_str{"EXHAUSTED"});

  EXPECT_THROW(tsq.get(d, uuid::random()), command_not_found_error);
  EXPECT_THROW(tsq.get("bad-domain", id), db::invalid_argument);
}

} // namespace
