// Tests of the commandbus stored procedures (sql/commandbus/V002) against a
// real PostgreSQL: the batch procedures: sp_update_batch_counters,
// sp_start_batch, sp_tsq_* and sp_refresh_batch_stats. The transitions and
// audit rows are those of the reference's procedures, with the inline batch
// counters of its packaged schema (docs/design.md, "Inline batch counters").
// Every test works in its own domain, so tests never see each other's rows.
// Shared fixtures: tests/db/procedures_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/procedures_support.hpp"

using namespace cmdbus;
using namespace cmdbus::procedures_test;

// -- sp_update_batch_counters -------------------------------------------------

TEST(ProceduresBatchCounters, EachUpdateTypeChangesItsCounters) {
  struct expectation {
    const char* type;
    int64_t completed, canceled, in_tsq, failed;
  };
  const expectation cases[] = {
    {"complete", 1, 0, 0, 0},    {"failed", 0, 0, 0, 1},
    {"tsq_move", 0, 0, 1, 0},    {"tsq_complete", 1, 0, -1, 0},
    {"tsq_cancel", 0, 1, -1, 0}, {"tsq_retry", 0, 0, -1, 0},
  };
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  for (const auto& c : cases) {
    auto batch_id = insert_batch(conn, domain, 10, "COMMAND", "IN_PROGRESS");
    EXPECT_FALSE(update_counters(conn, domain, batch_id, std::string{c.type}))
      << c.type;
    auto b = read_batch(conn, domain, batch_id);
    EXPECT_EQ(b.completed, c.completed) << c.type;
    EXPECT_EQ(b.canceled, c.canceled) << c.type;
    EXPECT_EQ(b.in_tsq, c.in_tsq) << c.type;
    EXPECT_EQ(b.failed, c.failed) << c.type;
    EXPECT_EQ(b.status, "IN_PROGRESS") << c.type;
  }
  EXPECT_EQ(count_events(conn, domain, "BATCH_COMPLETED"), 0);
}

TEST(ProceduresBatchCounters, UnknownUpdateTypeRaises) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 1, "COMMAND", "IN_PROGRESS");
  for (const opt_str& type : {opt_str{"bogus"}, opt_str{"COMPLETE"}, opt_str{}}) {
    try {
      update_counters(conn, domain, batch_id, type);
      FAIL() << "expected an exception for " << type.value_or("NULL");
    } catch (const db::error& e) {
      EXPECT_EQ(e.code(), db::errc::raise_exception);
      EXPECT_NE(std::string{e.what()}.find("unknown update type"),
                std::string::npos)
        << e.what();
      EXPECT_NE(std::string{e.what()}.find(type.value_or("NULL")),
                std::string::npos)
        << e.what();
    }
  }
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.completed + b.canceled + b.in_tsq + b.failed, 0);
}

TEST(ProceduresBatchCounters, NullOrMissingBatchReturnsFalse) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  EXPECT_FALSE(update_counters(conn, domain, std::nullopt, "complete"));
  EXPECT_FALSE(update_counters(conn, domain, test::new_uuid(), "complete"));
  // A batch of another domain is a missing batch.
  auto other_domain = test::unique_name("d");
  auto foreign = insert_batch(conn, other_domain, 1);
  EXPECT_FALSE(update_counters(conn, domain, foreign, "complete"));
  EXPECT_EQ(read_batch(conn, other_domain, foreign).completed, 0);
}

TEST(ProceduresBatchCounters, CompletesOnlyOnTheTransitionIntoATerminalStatus) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 1, "COMMAND", "IN_PROGRESS");
  EXPECT_TRUE(update_counters(conn, domain, batch_id, "complete"));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  ASSERT_TRUE(b.completed_at);
  auto completed_at = *b.completed_at;

  // Over-counting (which our callers avoid) never re-completes a batch.
  EXPECT_FALSE(update_counters(conn, domain, batch_id, "tsq_move"));
  EXPECT_FALSE(update_counters(conn, domain, batch_id, "tsq_cancel"));
  b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_EQ(b.completed_at, completed_at);
  EXPECT_EQ(count_events(conn, domain, "BATCH_COMPLETED"), 1);
}

TEST(ProceduresBatchCounters, CompletionNeedsAnEmptyTroubleshootingQueue) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2, "COMMAND", "IN_PROGRESS");
  EXPECT_FALSE(update_counters(conn, domain, batch_id, "tsq_move"));
  EXPECT_FALSE(update_counters(conn, domain, batch_id, "complete"));
  EXPECT_FALSE(update_counters(conn, domain, batch_id, "complete"));
  EXPECT_NE(read_batch(conn, domain, batch_id).status, "COMPLETED");
  EXPECT_EQ(count_events(conn, domain, "BATCH_COMPLETED"), 0);
}

TEST(ProceduresBatchCounters, CompletionWithFailuresViaFailedAndViaCanceled) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto via_failed = insert_batch(conn, domain, 2, "COMMAND", "IN_PROGRESS");
  EXPECT_FALSE(update_counters(conn, domain, via_failed, "failed"));
  EXPECT_TRUE(update_counters(conn, domain, via_failed, "complete"));
  EXPECT_EQ(read_batch(conn, domain, via_failed).status,
            "COMPLETED_WITH_FAILURES");

  auto via_cancel = insert_batch(conn, domain, 2, "COMMAND", "IN_PROGRESS");
  EXPECT_FALSE(update_counters(conn, domain, via_cancel, "complete"));
  EXPECT_FALSE(update_counters(conn, domain, via_cancel, "tsq_move"));
  EXPECT_TRUE(update_counters(conn, domain, via_cancel, "tsq_cancel"));
  EXPECT_EQ(read_batch(conn, domain, via_cancel).status,
            "COMPLETED_WITH_FAILURES");

  auto all_failed = insert_batch(conn, domain, 1, "COMMAND", "IN_PROGRESS");
  EXPECT_TRUE(update_counters(conn, domain, all_failed, "failed"));
  auto trail = audit_trail(conn, domain, all_failed);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "BATCH_COMPLETED");
  EXPECT_TRUE(json_eq(conn, trail[0].details,
                      R"({"batch_id":")" + all_failed
                        + R"(","total_count":1,"completed_count":0,)"
                          R"("canceled_count":0,"failed_count":1})"));
}

// -- sp_start_batch -----------------------------------------------------------

TEST(ProceduresStartBatch, MovesPendingToInProgressOnce) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 3);
  EXPECT_TRUE(call_bool(conn, "sp_start_batch", domain, batch_id));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  ASSERT_TRUE(b.started_at);
  auto started_at = *b.started_at;
  EXPECT_FALSE(call_bool(conn, "sp_start_batch", domain, batch_id));
  b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.started_at, started_at);
  auto trail = audit_trail(conn, domain, batch_id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "BATCH_STARTED");
  EXPECT_TRUE(json_eq(conn, trail[0].details,
                      R"({"batch_id":")" + batch_id + R"("})"));

  auto done = insert_batch(conn, domain, 1, "COMMAND", "COMPLETED");
  EXPECT_FALSE(call_bool(conn, "sp_start_batch", domain, done));
  EXPECT_EQ(read_batch(conn, domain, done).status, "COMPLETED");
  EXPECT_FALSE(call_bool(conn, "sp_start_batch", domain, test::new_uuid()));
  EXPECT_FALSE(call_bool(conn, "sp_start_batch", domain, std::nullopt));
  EXPECT_EQ(count_events(conn, domain, "BATCH_STARTED"), 1);
}

// -- sp_tsq_* -----------------------------------------------------------------

TEST(ProceduresTsq, NullBatchReturnsFalse) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  for (const char* fn : {"sp_tsq_complete", "sp_tsq_cancel", "sp_tsq_retry"}) {
    EXPECT_FALSE(call_bool(conn, fn, domain, std::nullopt)) << fn;
    EXPECT_FALSE(call_bool(conn, fn, domain, test::new_uuid())) << fn;
  }
}

TEST(ProceduresTsq, CompleteCancelAndRetryMoveTheItemOutOfTheTsq) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 3, "COMMAND", "IN_PROGRESS");
  for (int i = 0; i < 3; ++i)
    EXPECT_FALSE(update_counters(conn, domain, batch_id, "tsq_move"));

  // A retry never completes a batch: the item is counted again when it ends.
  EXPECT_FALSE(call_bool(conn, "sp_tsq_retry", domain, batch_id));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.in_tsq, 2);
  EXPECT_EQ(b.completed + b.canceled + b.failed, 0);

  EXPECT_FALSE(call_bool(conn, "sp_tsq_complete", domain, batch_id));
  EXPECT_FALSE(call_bool(conn, "sp_tsq_cancel", domain, batch_id));
  b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.canceled, 1);
  EXPECT_EQ(b.status, "IN_PROGRESS");

  // The retried item completes the batch.
  EXPECT_TRUE(update_counters(conn, domain, batch_id, "complete"));
  EXPECT_EQ(read_batch(conn, domain, batch_id).status, "COMPLETED_WITH_FAILURES");
}

TEST(ProceduresTsq, OperatorCompleteOfTheLastItemCompletesTheBatch) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 1, "COMMAND", "IN_PROGRESS");
  EXPECT_FALSE(update_counters(conn, domain, batch_id, "tsq_move"));
  EXPECT_TRUE(call_bool(conn, "sp_tsq_complete", domain, batch_id));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(audit_events(conn, domain, batch_id),
            std::vector<std::string>{"BATCH_COMPLETED"});
}

// -- sp_refresh_batch_stats ---------------------------------------------------

namespace {

struct stats {
  int64_t completed, failed, canceled, in_tsq;
  bool is_complete;
};

std::optional<stats> refresh(db::connection& conn, const std::string& domain,
                             const std::string& batch_id) {
  auto res = conn.query(
    "SELECT * FROM commandbus.sp_refresh_batch_stats($1, $2::uuid)", domain,
    batch_id);
  if (res.rows() == 0)
    return std::nullopt;
  EXPECT_EQ(res.rows(), 1);
  EXPECT_EQ(res.columns(), 5);
  EXPECT_EQ(res.column_name(0), "completed_count");
  EXPECT_EQ(res.column_name(1), "failed_count");
  EXPECT_EQ(res.column_name(2), "canceled_count");
  EXPECT_EQ(res.column_name(3), "in_troubleshooting_count");
  EXPECT_EQ(res.column_name(4), "is_complete");
  return stats{res.int64(0, 0), res.int64(0, 1), res.int64(0, 2),
               res.int64(0, 3), res.boolean(0, 4)};
}

void insert_commands(db::connection& conn, const std::string& domain,
                     const std::string& batch_id,
                     std::initializer_list<const char*> statuses) {
  for (const char* status : statuses) {
    command_spec spec;
    spec.status = status;
    spec.batch_id = batch_id;
    insert_command(conn, domain, spec);
  }
}

} // namespace

TEST(ProceduresRefreshStats, MissingBatchGivesAnEmptyResult) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  EXPECT_FALSE(refresh(conn, domain, test::new_uuid()));
  auto foreign = insert_batch(conn, test::unique_name("d"), 1);
  EXPECT_FALSE(refresh(conn, domain, foreign));
}

TEST(ProceduresRefreshStats, NothingDoneLeavesAPendingBatchAlone) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2);
  insert_commands(conn, domain, batch_id, {"PENDING", "IN_PROGRESS"});
  auto s = refresh(conn, domain, batch_id);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->completed + s->failed + s->canceled + s->in_tsq, 0);
  EXPECT_FALSE(s->is_complete);
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "PENDING");
  EXPECT_FALSE(b.started_at);
  EXPECT_FALSE(b.completed_at);
}

TEST(ProceduresRefreshStats, PartiallyDoneCommandBatchIsInProgress) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 3);
  insert_commands(conn, domain, batch_id, {"COMPLETED", "IN_PROGRESS", "PENDING"});
  auto s = refresh(conn, domain, batch_id);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->completed, 1);
  EXPECT_EQ(s->failed + s->canceled + s->in_tsq, 0);
  EXPECT_FALSE(s->is_complete);
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_EQ(b.completed, 1);
  EXPECT_TRUE(b.started_at);
  EXPECT_FALSE(b.completed_at);
}

TEST(ProceduresRefreshStats, AllCompletedCommandBatchIsCompleted) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 3, "COMMAND", "IN_PROGRESS");
  insert_commands(conn, domain, batch_id, {"COMPLETED", "COMPLETED", "COMPLETED"});
  auto s = refresh(conn, domain, batch_id);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->completed, 3);
  EXPECT_TRUE(s->is_complete);
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_EQ(b.completed, 3);
  ASSERT_TRUE(b.completed_at);
  EXPECT_TRUE(b.started_at);

  // completed_at is set once.
  auto completed_at = *b.completed_at;
  ASSERT_TRUE(refresh(conn, domain, batch_id));
  EXPECT_EQ(read_batch(conn, domain, batch_id).completed_at, completed_at);
}

TEST(ProceduresRefreshStats, FailuresAndTroubleshootingItemsCountAsDone) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto mixed = insert_batch(conn, domain, 4, "COMMAND", "IN_PROGRESS");
  insert_commands(conn, domain, mixed,
                  {"COMPLETED", "FAILED", "CANCELED", "IN_TROUBLESHOOTING_QUEUE"});
  auto s = refresh(conn, domain, mixed);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->completed, 1);
  EXPECT_EQ(s->failed, 1);
  EXPECT_EQ(s->canceled, 1);
  EXPECT_EQ(s->in_tsq, 1);
  EXPECT_TRUE(s->is_complete);
  auto b = read_batch(conn, domain, mixed);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.failed, 1);
  EXPECT_EQ(b.canceled, 1);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_TRUE(b.completed_at);

  // A TSQ item alone is enough for COMPLETED_WITH_FAILURES.
  auto tsq_only = insert_batch(conn, domain, 2);
  insert_commands(conn, domain, tsq_only, {"COMPLETED", "IN_TROUBLESHOOTING_QUEUE"});
  s = refresh(conn, domain, tsq_only);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->is_complete);
  b = read_batch(conn, domain, tsq_only);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_TRUE(b.started_at);
}

TEST(ProceduresRefreshStats, RepairsInlineCounters) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2, "COMMAND", "IN_PROGRESS");
  insert_commands(conn, domain, batch_id, {"COMPLETED", "IN_PROGRESS"});
  conn.query("UPDATE commandbus.batch SET completed_count = 5,"
             " in_troubleshooting_count = -1, failed_count = 2"
             " WHERE domain = $1 AND batch_id = $2::uuid",
             domain, batch_id);
  ASSERT_TRUE(refresh(conn, domain, batch_id));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_EQ(b.failed, 0);
  EXPECT_EQ(b.status, "IN_PROGRESS");
}

TEST(ProceduresRefreshStats, ProcessBatchCountsProcesses) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 5, "PROCESS");
  insert_process(conn, domain, "COMPLETED", batch_id);
  insert_process(conn, domain, "COMPENSATED", batch_id);
  insert_process(conn, domain, "CANCELED", batch_id);
  auto waiting = insert_process(conn, domain, "WAITING", batch_id);
  auto running = insert_process(conn, domain, "IN_PROGRESS", batch_id);
  // Commands of the processes (correlation_id = process_id); only the
  // waiting process has one in the TSQ.
  command_spec spec;
  spec.correlation_id = waiting;
  spec.status = "COMPLETED";
  insert_command(conn, domain, spec);
  spec.status = "IN_TROUBLESHOOTING_QUEUE";
  insert_command(conn, domain, spec);
  spec.correlation_id = running;
  spec.status = "IN_PROGRESS";
  insert_command(conn, domain, spec);
  // Commands that are not the processes' do not count.
  command_spec unrelated;
  unrelated.status = "IN_TROUBLESHOOTING_QUEUE";
  unrelated.batch_id = batch_id;
  insert_command(conn, domain, unrelated);

  auto s = refresh(conn, domain, batch_id);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->completed, 2);
  EXPECT_EQ(s->failed, 0);
  EXPECT_EQ(s->canceled, 1);
  EXPECT_EQ(s->in_tsq, 1);
  EXPECT_FALSE(s->is_complete);
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_TRUE(b.started_at);
  EXPECT_FALSE(b.completed_at);

  // The last process fails: everything is done, with failures.
  conn.query("UPDATE commandbus.process SET status = 'FAILED'"
             " WHERE domain = $1 AND process_id = $2::uuid",
             domain, running);
  s = refresh(conn, domain, batch_id);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->canceled, 2);
  EXPECT_EQ(s->in_tsq, 1);
  EXPECT_TRUE(s->is_complete);
  b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_EQ(b.canceled, 2);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_TRUE(b.completed_at);
}

TEST(ProceduresRefreshStats, ProcessBatchOfCompletedProcessesIsCompleted) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2, "PROCESS");
  auto first = insert_process(conn, domain, "COMPLETED", batch_id);
  insert_process(conn, domain, "COMPENSATED", batch_id);
  // A terminal process with a command in the TSQ is not counted as in the TSQ.
  command_spec spec;
  spec.correlation_id = first;
  spec.status = "IN_TROUBLESHOOTING_QUEUE";
  insert_command(conn, domain, spec);

  auto s = refresh(conn, domain, batch_id);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->completed, 2);
  EXPECT_EQ(s->in_tsq, 0);
  EXPECT_TRUE(s->is_complete);
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_TRUE(b.started_at);
  EXPECT_TRUE(b.completed_at);
}
