// Bulk operations on the troubleshooting queue: selection by --all,
// --batch, --error-code and --older-than, --dry-run, and re-running an
// interrupted run (the API's apply and `cmdbus tsq`).

#include <algorithm>
#include <thread>

#include "tests/db/tsq_support.hpp"
#include "tests/support/eventually.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

using TsqBulk = TsqTest;

// Sets the time the command moved to the TSQ to `minutes` ago.
void age(db::connection& conn, const std::string& domain, const uuid& id,
         int minutes) {
  conn.query("UPDATE commandbus.command SET updated_at = NOW() - "
             "make_interval(mins => $3::int) WHERE domain = $1 AND "
             "command_id = $2::uuid",
             domain, id.to_string(), minutes);
}

TEST_F(TsqBulk, AllRetriesEveryTsqCommandOfTheDomain) {
  auto a = park();
  auto b = park();
  auto other = park({}, unique_name("tsqother"));
  (void) other;
  auto done = env.bus.send(make_req(d)); // not in the TSQ: untouched
  auto r = cli({"tsq", "retry", d, "--all", "--operator", "ops"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("retry: 2 matched, 2 done, 0 skipped, 0 failed"),
            std::string::npos)
    << r.out;
  EXPECT_EQ(status(a), opt_str{"PENDING"});
  EXPECT_EQ(status(b), opt_str{"PENDING"});
  EXPECT_EQ(attempts_of(conn, d, done.command_id), 0);
  EXPECT_EQ(count_events(conn, d, done.command_id, "OPERATOR_RETRY"), 0);
  EXPECT_EQ(audit_detail(conn, d, a, "OPERATOR_RETRY", "{operator}"),
            opt_str{"ops"});
}

TEST_F(TsqBulk, BatchSelectsOnlyThatBatchsMembers) {
  auto batch = make_batch(3);
  for (auto& c : batch.command_results)
    to_tsq(d, c.command_id, {}, batch.batch_id);
  auto loose = park();
  auto r = cli({"tsq", "cancel", d, "--batch", batch.batch_id.to_string(),
                "--reason", "batch withdrawn", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(conn, r.out, "{done}"), opt_str{"3"}) << r.out;
  EXPECT_EQ(jget(conn, r.out, "{matched}"), opt_str{"3"});
  // The last of them completed the batch.
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*) FROM jsonb_array_elements($1::jsonb -> "
                   "'results') e WHERE (e->>'batch_completed')::boolean",
                   r.out),
            opt_str{"1"});
  for (auto& c : batch.command_results)
    EXPECT_EQ(status(c.command_id), opt_str{"CANCELED"});
  EXPECT_EQ(status(loose), opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  auto b = read_batch(conn, d, batch.batch_id.to_string());
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_EQ(b.canceled, 3);
}

TEST_F(TsqBulk, ErrorCodeAndOlderThanNarrowTheSelection) {
  park_spec timeout;
  timeout.error_code = "TIMEOUT";
  auto old_timeout = park(timeout);
  auto new_timeout = park(timeout);
  auto old_other = park();
  age(conn, d, old_timeout, 120);
  age(conn, d, old_other, 120);
  auto r = cli({"tsq", "complete", d, "--error-code", "TIMEOUT", "--older-than",
                "1h", "--result", R"({"manual":true})"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("complete: 1 matched, 1 done"), std::string::npos)
    << r.out;
  EXPECT_EQ(status(old_timeout), opt_str{"COMPLETED"});
  EXPECT_EQ(status(new_timeout), opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  EXPECT_EQ(status(old_other), opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  EXPECT_EQ(audit_detail(conn, d, old_timeout, "OPERATOR_COMPLETE",
                         "{has_result_data}"),
            opt_str{"true"});
}

TEST_F(TsqBulk, DryRunListsAndChangesNothing) {
  park_spec spec;
  spec.reply_to = replies;
  auto a = park(spec);
  auto b = park(spec);
  auto before = scalar(conn,
                       "SELECT string_agg(command_id || status || attempts "
                       "|| updated_at, ',' ORDER BY command_id) FROM "
                       "commandbus.command WHERE domain = $1",
                       d);
  auto audits = scalar(
    conn, "SELECT count(*) FROM commandbus.audit WHERE domain = $1", d);
  for (auto op : {"retry", "cancel", "complete"}) {
    auto r = cli({"tsq", op, d, "--all", "--dry-run"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(a.to_string()), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(b.to_string()), std::string::npos);
    EXPECT_NE(r.out.find("nothing changed"), std::string::npos);
    r = cli({"tsq", op, d, "--all", "--dry-run", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(jget(conn, r.out, "{matched}"), opt_str{"2"}) << r.out;
    EXPECT_EQ(jget(conn, r.out, "{dry_run}"), opt_str{"true"});
  }
  EXPECT_EQ(scalar(conn,
                   "SELECT string_agg(command_id || status || attempts || "
                   "updated_at, ',' ORDER BY command_id) FROM "
                   "commandbus.command WHERE domain = $1",
                   d),
            before);
  EXPECT_EQ(
    scalar(conn, "SELECT count(*) FROM commandbus.audit WHERE domain = $1", d),
    audits);
  EXPECT_EQ(queue_rows(conn, q), 0);
  EXPECT_TRUE(reply_messages().empty());
}

TEST_F(TsqBulk, AnInterruptedRunIsCompletedByARerun) {
  std::vector<uuid> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(park());
    age(conn, d, ids.back(), 10 - i);
  }
  // The first run stops after two commands (--limit takes the oldest).
  auto r = cli({"tsq", "retry", d, "--all", "--limit", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("retry: 2 matched, 2 done, 0 skipped, 0 failed"),
            std::string::npos)
    << r.out;
  EXPECT_EQ(status(ids[0]), opt_str{"PENDING"});
  EXPECT_EQ(status(ids[1]), opt_str{"PENDING"});
  EXPECT_EQ(status(ids[2]), opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  // Meanwhile another operator retried one more.
  tsq.retry(d, ids[3]);
  r = cli({"tsq", "retry", d, "--all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("retry: 2 matched, 2 done, 0 skipped, 0 failed"),
            std::string::npos)
    << r.out;
  for (auto& id : ids) {
    EXPECT_EQ(status(id), opt_str{"PENDING"});
    EXPECT_EQ(count_events(conn, d, id, "OPERATOR_RETRY"), 1);
  }
  EXPECT_EQ(queue_rows(conn, q), 5);
}

TEST_F(TsqBulk, ARunCutOffMidwayIsCompletedByARerun) {
  std::vector<uuid> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(park());
    age(conn, d, ids.back(), 10 - i);
  }
  // The run waits on the third command (its row is locked here) when its
  // connection is lost: the two before it committed, nothing after it ran.
  auto app = unique_name("tsqcut");
  auto holder = connect();
  holder.exec("BEGIN");
  holder.query("SELECT 1 FROM commandbus.command WHERE domain = $1 AND "
               "command_id = $2::uuid FOR UPDATE",
               d, ids[2].to_string());
  process_result r;
  std::thread run{[&] {
    r = run_cmdbus({"tsq", "cancel", d, "--all", "--reason", "cut"},
                   {"CMDBUS_DSN=" + dsn() + " application_name=" + app});
  }};
  bool waiting = eventually([&] {
    return scalar(conn,
                  "SELECT count(*) FROM pg_stat_activity WHERE "
                  "application_name = $1 AND wait_event_type = 'Lock'",
                  app)
           == opt_str{"1"};
  });
  conn.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
             "application_name = $1",
             app);
  run.join();
  holder.exec("ROLLBACK");
  ASSERT_TRUE(waiting);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(status(ids[0]), opt_str{"CANCELED"});
  EXPECT_EQ(status(ids[1]), opt_str{"CANCELED"});
  for (size_t i = 2; i < ids.size(); ++i)
    EXPECT_EQ(status(ids[i]), opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  // The same command again does the rest, and nothing twice.
  r = cli({"tsq", "cancel", d, "--all", "--reason", "cut"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cancel: 3 matched, 3 done, 0 skipped, 0 failed"),
            std::string::npos)
    << r.out;
  for (auto& id : ids) {
    EXPECT_EQ(status(id), opt_str{"CANCELED"});
    EXPECT_EQ(count_events(conn, d, id, "OPERATOR_CANCEL"), 1);
  }
}

TEST_F(TsqBulk, CommandsThatLeftTheTsqAfterTheSelectionAreSkipped) {
  std::vector<uuid> ids;
  for (int i = 0; i < 4; ++i)
    ids.push_back(park());
  tsq_filter f;
  f.domain = d;
  f.limit = -1;
  auto selected = tsq.ids(f);
  ASSERT_EQ(selected.size(), 4u);
  // Two leave the TSQ between the selection and their turn.
  tsq.cancel(d, selected[1], std::string{"by someone else"});
  tsq.retry(d, selected[2]);
  tsq_operation op;
  op.action = tsq_operation::kind::complete;
  std::vector<tsq_item_outcome::kind> seen;
  auto res = tsq.apply(d, selected, op, [&](const tsq_item_outcome& x) {
    seen.push_back(x.outcome);
  });
  EXPECT_EQ(res.matched, 4);
  EXPECT_EQ(res.done, 2);
  EXPECT_EQ(res.skipped, 2);
  EXPECT_EQ(res.failed, 0);
  EXPECT_EQ(
    seen, (std::vector<tsq_item_outcome::kind>{
            tsq_item_outcome::kind::done, tsq_item_outcome::kind::not_in_tsq,
            tsq_item_outcome::kind::not_in_tsq, tsq_item_outcome::kind::done}));
  EXPECT_EQ(status(selected[1]), opt_str{"CANCELED"});
  EXPECT_EQ(status(selected[2]), opt_str{"PENDING"});
  // Re-running the whole selection does nothing more.
  res = tsq.apply(d, selected, op);
  EXPECT_EQ(res.done, 0);
  EXPECT_EQ(res.skipped, 4);
}

TEST_F(TsqBulk, ARetryWithoutArchivedMessageFailsAndTheOthersGoOn) {
  auto a = park();
  auto b = park();
  conn.exec("DELETE FROM pgmq.a_" + q);
  (void) a;
  (void) b;
  auto r = cli({"tsq", "retry", d, "--all", "--json"});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_EQ(jget(conn, r.out, "{failed}"), opt_str{"2"}) << r.out;
  EXPECT_EQ(status(a), opt_str{"IN_TROUBLESHOOTING_QUEUE"});
}

} // namespace
