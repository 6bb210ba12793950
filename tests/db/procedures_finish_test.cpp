// Tests of the commandbus stored procedures (sql/commandbus/V002) against a
// real PostgreSQL: sp_finish_command (with its batch counters) and
// sp_fail_command. The transitions and audit rows are those of the reference's
// procedures, with the inline batch counters of its packaged schema
// (docs/design.md, "Inline batch counters"). Every test works in its own
// domain, so tests never see each other's rows. Shared fixtures:
// tests/db/procedures_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/procedures_support.hpp"

using namespace cmdbus;
using namespace cmdbus::procedures_test;

// -- sp_finish_command --------------------------------------------------------

TEST(ProceduresFinish, UnknownCommandOnlyAuditsAndReturnsFalse) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 1, "COMMAND", "IN_PROGRESS");
  auto id = test::new_uuid();
  auto args = completed_in(batch_id);
  args.details = R"({"msg_id":1,"reply_to":null,"has_result":false})";
  EXPECT_FALSE(finish(conn, domain, id, args));
  auto trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "COMPLETED");
  EXPECT_TRUE(json_eq(conn, trail[0].details, *args.details));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.completed, 0);
  EXPECT_EQ(b.status, "IN_PROGRESS");
}

TEST(ProceduresFinish, TransitionsStatusAndAuditsTheEvent) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  command_spec spec;
  spec.status = "IN_PROGRESS";
  auto id = insert_command(conn, domain, spec);
  finish_args args;
  args.details = R"({"msg_id":7,"reply_to":"r","has_result":true})";
  EXPECT_FALSE(finish(conn, domain, id, args)); // no batch: FALSE
  auto row = read_command(conn, domain, id);
  EXPECT_EQ(row.status, "COMPLETED");
  EXPECT_TRUE(row.recently_updated);
  EXPECT_FALSE(row.last_error_type);
  auto trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "COMPLETED");
  EXPECT_TRUE(json_eq(conn, trail[0].details, *args.details));

  // A NULL p_details gives a NULL details_json.
  auto other = insert_command(conn, domain, spec);
  EXPECT_FALSE(finish(conn, domain, other, business_failed_in(std::nullopt)));
  trail = audit_trail(conn, domain, other);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "BUSINESS_RULE_FAILED");
  EXPECT_FALSE(trail[0].details);
  row = read_command(conn, domain, other);
  EXPECT_EQ(row.status, "FAILED");
  EXPECT_EQ(row.last_error_type, "BUSINESS_RULE");
  EXPECT_EQ(row.last_error_code, "RULE");
  EXPECT_EQ(row.last_error_msg, "not allowed");
}

TEST(ProceduresFinish, KeepsStoredErrorFieldsWhereTheNewOnesAreNull) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  command_spec spec;
  spec.status = "IN_PROGRESS";
  spec.last_error_type = "TRANSIENT";
  spec.last_error_code = "TIMEOUT";
  spec.last_error_msg = "timed out";
  auto id = insert_command(conn, domain, spec);
  EXPECT_FALSE(finish(conn, domain, id, {}));
  auto row = read_command(conn, domain, id);
  EXPECT_EQ(row.status, "COMPLETED");
  EXPECT_EQ(row.last_error_type, "TRANSIENT");
  EXPECT_EQ(row.last_error_code, "TIMEOUT");
  EXPECT_EQ(row.last_error_msg, "timed out");

  // Only the given fields replace the stored ones.
  auto partial = insert_command(conn, domain, spec);
  finish_args args = to_tsq_in(std::nullopt);
  args.error_type = "PERMANENT";
  args.error_code = std::nullopt;
  args.error_msg = "now permanent";
  EXPECT_FALSE(finish(conn, domain, partial, args));
  row = read_command(conn, domain, partial);
  EXPECT_EQ(row.status, "IN_TROUBLESHOOTING_QUEUE");
  EXPECT_EQ(row.last_error_type, "PERMANENT");
  EXPECT_EQ(row.last_error_code, "TIMEOUT");
  EXPECT_EQ(row.last_error_msg, "now permanent");
}

TEST(ProceduresFinish, RefinishWithTheSameStatusOnlyAddsAnAuditRow) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2, "COMMAND", "IN_PROGRESS");
  command_spec spec;
  spec.status = "COMPLETED";
  spec.batch_id = batch_id;
  spec.last_error_code = "OLD";
  auto id = insert_command(conn, domain, spec);
  auto before = read_command(conn, domain, id);

  auto args = completed_in(batch_id);
  args.error_code = "NEW";
  args.details = R"({"msg_id":8})";
  EXPECT_FALSE(finish(conn, domain, id, args));
  auto after = read_command(conn, domain, id);
  EXPECT_EQ(after.status, "COMPLETED");
  EXPECT_EQ(after.updated_at, before.updated_at);
  EXPECT_EQ(after.last_error_code, "OLD");
  auto trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_TRUE(json_eq(conn, trail[0].details, *args.details));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.completed, 0);
  EXPECT_EQ(b.status, "IN_PROGRESS");
}

// -- sp_finish_command: batch counters ----------------------------------------

TEST(ProceduresFinishBatch, CountsCompletionsAndReturnsTrueWhenTheBatchCompletes) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2);
  command_spec spec;
  spec.batch_id = batch_id;
  auto first = insert_command(conn, domain, spec);
  auto second = insert_command(conn, domain, spec);
  ASSERT_EQ(receive_defaults(conn, domain, first).rows(), 1);
  ASSERT_EQ(receive_defaults(conn, domain, second).rows(), 1);

  EXPECT_FALSE(finish(conn, domain, first, completed_in(batch_id)));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_EQ(b.completed, 1);
  EXPECT_FALSE(b.completed_at);

  EXPECT_TRUE(finish(conn, domain, second, completed_in(batch_id)));
  b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_EQ(b.completed, 2);
  EXPECT_TRUE(b.completed_at);
  auto trail = audit_trail(conn, domain, batch_id);
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_EQ(trail[0].event_type, "BATCH_STARTED");
  EXPECT_EQ(trail[1].event_type, "BATCH_COMPLETED");
  EXPECT_TRUE(json_eq(conn, trail[1].details,
                      R"({"batch_id":")" + batch_id
                        + R"(","total_count":2,"completed_count":2,)"
                          R"("canceled_count":0,"failed_count":0})"));
}

TEST(ProceduresFinishBatch, BusinessRuleFailureCountsAsFailed) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2);
  command_spec spec;
  spec.status = "IN_PROGRESS";
  spec.batch_id = batch_id;
  auto ok = insert_command(conn, domain, spec);
  auto bad = insert_command(conn, domain, spec);

  EXPECT_FALSE(finish(conn, domain, bad, business_failed_in(batch_id)));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.failed, 1);
  EXPECT_EQ(b.completed, 0);

  EXPECT_TRUE(finish(conn, domain, ok, completed_in(batch_id)));
  b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.failed, 1);
  auto trail = audit_trail(conn, domain, batch_id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_TRUE(json_eq(conn, trail[0].details,
                      R"({"batch_id":")" + batch_id
                        + R"(","total_count":2,"completed_count":1,)"
                          R"("canceled_count":0,"failed_count":1})"));
}

TEST(ProceduresFinishBatch, TroubleshootingBlocksCompletionUntilCanceled) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2);
  command_spec spec;
  spec.status = "IN_PROGRESS";
  spec.batch_id = batch_id;
  auto ok = insert_command(conn, domain, spec);
  auto stuck = insert_command(conn, domain, spec);

  EXPECT_FALSE(finish(conn, domain, stuck, to_tsq_in(batch_id)));
  EXPECT_FALSE(finish(conn, domain, ok, completed_in(batch_id)));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.in_tsq, 1);
  EXPECT_EQ(b.completed, 1);
  EXPECT_NE(b.status, "COMPLETED");
  EXPECT_FALSE(b.completed_at);

  // The operator cancels the TSQ item (TroubleshootingQueue.operator_cancel).
  set_command_status(conn, domain, stuck, "CANCELED");
  EXPECT_TRUE(call_bool(conn, "sp_tsq_cancel", domain, batch_id));
  b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED_WITH_FAILURES");
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_EQ(b.canceled, 1);
  EXPECT_TRUE(b.completed_at);
  auto trail = audit_trail(conn, domain, batch_id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_TRUE(json_eq(conn, trail[0].details,
                      R"({"batch_id":")" + batch_id
                        + R"(","total_count":2,"completed_count":1,)"
                          R"("canceled_count":1,"failed_count":0})"));
}

TEST(ProceduresFinishBatch, LateSuccessOfATroubleshootingItemIsTsqComplete) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 1);
  command_spec spec;
  spec.status = "IN_PROGRESS";
  spec.batch_id = batch_id;
  auto id = insert_command(conn, domain, spec);
  EXPECT_FALSE(finish(conn, domain, id, to_tsq_in(batch_id)));
  EXPECT_EQ(read_batch(conn, domain, batch_id).in_tsq, 1);

  EXPECT_TRUE(finish(conn, domain, id, completed_in(batch_id)));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_EQ(b.completed, 1);
}

TEST(ProceduresFinishBatch, OtherTransitionsChangeNoCounter) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 1, "COMMAND", "IN_PROGRESS");
  command_spec spec;
  spec.batch_id = batch_id;
  // TSQ from COMPLETED.
  spec.status = "COMPLETED";
  auto done = insert_command(conn, domain, spec);
  EXPECT_FALSE(finish(conn, domain, done, to_tsq_in(batch_id)));
  EXPECT_EQ(read_command(conn, domain, done).status, "IN_TROUBLESHOOTING_QUEUE");
  // COMPLETED from PENDING (never received) and FAILED from the TSQ.
  spec.status = "PENDING";
  auto pending = insert_command(conn, domain, spec);
  EXPECT_FALSE(finish(conn, domain, pending, completed_in(batch_id)));
  spec.status = "IN_TROUBLESHOOTING_QUEUE";
  auto in_tsq = insert_command(conn, domain, spec);
  EXPECT_FALSE(finish(conn, domain, in_tsq, business_failed_in(batch_id)));

  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.completed + b.canceled + b.in_tsq + b.failed, 0);
  EXPECT_EQ(b.status, "IN_PROGRESS");
}

TEST(ProceduresFinishBatch, CountersFollowTheGivenBatchIdOnly) {
  // As in the reference, the counters are updated only when the caller
  // passes p_batch_id (the worker passes the command's batch_id).
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 1, "COMMAND", "IN_PROGRESS");
  command_spec spec;
  spec.status = "IN_PROGRESS";
  spec.batch_id = batch_id;
  auto id = insert_command(conn, domain, spec);
  EXPECT_FALSE(finish(conn, domain, id, {}));
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.completed, 0);
  EXPECT_EQ(b.status, "IN_PROGRESS");
}

TEST(ProceduresFinishBatch, MissingBatchRowReturnsFalse) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  command_spec spec;
  spec.status = "IN_PROGRESS";
  spec.batch_id = test::new_uuid();
  auto id = insert_command(conn, domain, spec);
  EXPECT_FALSE(finish(conn, domain, id, completed_in(*spec.batch_id)));
  EXPECT_EQ(read_command(conn, domain, id).status, "COMPLETED");
}

TEST(ProceduresFinishBatch, RedeliveryAndRefinishAreNotCountedTwice) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2);
  command_spec spec;
  spec.batch_id = batch_id;
  auto first = insert_command(conn, domain, spec);
  auto second = insert_command(conn, domain, spec);

  ASSERT_EQ(receive_defaults(conn, domain, first).rows(), 1);
  EXPECT_FALSE(finish(conn, domain, first, completed_in(batch_id)));
  // A redelivered message of the completed command: receive refuses it, a
  // second completion (e.g. a worker that lost its lease) is only audited.
  EXPECT_EQ(receive_defaults(conn, domain, first).rows(), 0);
  EXPECT_FALSE(finish(conn, domain, first, completed_in(batch_id)));
  EXPECT_EQ(read_batch(conn, domain, batch_id).completed, 1);

  ASSERT_EQ(receive_defaults(conn, domain, second).rows(), 1);
  EXPECT_FALSE(finish(conn, domain, second, to_tsq_in(batch_id)));
  EXPECT_FALSE(finish(conn, domain, second, to_tsq_in(batch_id)));
  EXPECT_EQ(read_batch(conn, domain, batch_id).in_tsq, 1);
  EXPECT_TRUE(finish(conn, domain, second, completed_in(batch_id)));
  EXPECT_FALSE(finish(conn, domain, second, completed_in(batch_id)));
  EXPECT_FALSE(finish(conn, domain, first, completed_in(batch_id)));

  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "COMPLETED");
  EXPECT_EQ(b.completed, 2);
  EXPECT_EQ(b.in_tsq, 0);
  EXPECT_EQ(count_events(conn, domain, "BATCH_COMPLETED"), 1);
  EXPECT_EQ(audit_events(conn, domain, first),
            (std::vector<std::string>{"RECEIVED", "COMPLETED", "COMPLETED",
                                      "COMPLETED"}));
}

// -- sp_fail_command ----------------------------------------------------------

TEST(ProceduresFail, RecordsTheErrorAndKeepsTheStatus) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  command_spec spec;
  spec.status = "IN_PROGRESS";
  spec.attempts = 1;
  auto id = insert_command(conn, domain, spec);
  EXPECT_TRUE(conn
                .query("SELECT commandbus.sp_fail_command($1, $2::uuid, $3,"
                       " $4, $5, $6::int, $7::int, $8::bigint)",
                       domain, id, "TRANSIENT", "TIMEOUT", "timed out", 1, 3, 7)
                .boolean(0, 0));
  auto row = read_command(conn, domain, id);
  EXPECT_EQ(row.status, "IN_PROGRESS");
  EXPECT_EQ(row.attempts, 1);
  EXPECT_EQ(row.last_error_type, "TRANSIENT");
  EXPECT_EQ(row.last_error_code, "TIMEOUT");
  EXPECT_EQ(row.last_error_msg, "timed out");
  EXPECT_TRUE(row.recently_updated);
  auto trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "FAILED");
  EXPECT_TRUE(json_eq(conn, trail[0].details,
                      R"({"msg_id":7,"attempt":1,"max_attempts":3,)"
                      R"("error_type":"TRANSIENT","error_code":"TIMEOUT",)"
                      R"("error_msg":"timed out"})"));

  // Unlike sp_finish_command, NULL error fields overwrite the stored ones.
  EXPECT_TRUE(conn
                .query("SELECT commandbus.sp_fail_command($1, $2::uuid, $3,"
                       " $4, $5, $6::int, $7::int, $8::bigint)",
                       domain, id, "TRANSIENT", std::nullopt, "again", 2, 3, 7)
                .boolean(0, 0));
  row = read_command(conn, domain, id);
  EXPECT_FALSE(row.last_error_code);
  EXPECT_EQ(row.last_error_msg, "again");
  trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_TRUE(json_eq(conn, trail[1].details,
                      R"({"msg_id":7,"attempt":2,"max_attempts":3,)"
                      R"("error_type":"TRANSIENT","error_code":null,)"
                      R"("error_msg":"again"})"));
}

TEST(ProceduresFail, UnknownCommandReturnsFalseWithoutAudit) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto id = test::new_uuid();
  EXPECT_FALSE(conn
                 .query("SELECT commandbus.sp_fail_command($1, $2::uuid, $3,"
                        " $4, $5, $6::int, $7::int, $8::bigint)",
                        domain, id, "TRANSIENT", "E", "m", 1, 3, 1)
                 .boolean(0, 0));
  EXPECT_TRUE(audit_trail(conn, domain, id).empty());
}
