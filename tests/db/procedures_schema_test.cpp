// Tests of the commandbus stored procedures (sql/commandbus/V002) against a
// real PostgreSQL: the schema (the reference's columns, indexes and defaults)
// and sp_receive_command. The transitions and audit rows are those of the
// reference's procedures, with the inline batch counters of its packaged schema
// (docs/design.md, "Inline batch counters"). Every test works in its own
// domain, so tests never see each other's rows. Shared fixtures:
// tests/db/procedures_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/procedures_support.hpp"

using namespace cmdbus;
using namespace cmdbus::procedures_test;

// -- schema -------------------------------------------------------------------

TEST(ProceduresSchema, TablesHaveTheReferenceColumnsInOrder) {
  auto conn = test::connect();
  auto columns = [&](const std::string& table) {
    auto res = conn.query("SELECT column_name FROM information_schema.columns"
                          " WHERE table_schema = 'commandbus'"
                          " AND table_name = $1 ORDER BY ordinal_position",
                          table);
    std::string out;
    for (int r = 0; r < res.rows(); ++r)
      out += std::string{res.text(r, 0)} + (r + 1 < res.rows() ? "," : "");
    return out;
  };
  EXPECT_EQ(columns("batch"),
            "domain,batch_id,name,custom_data,status,total_count,"
            "completed_count,canceled_count,in_troubleshooting_count,"
            "created_at,started_at,completed_at,batch_type,failed_count");
  EXPECT_EQ(columns("command"),
            "domain,queue_name,msg_id,command_id,command_type,status,attempts,"
            "max_attempts,lease_expires_at,last_error_type,last_error_code,"
            "last_error_msg,created_at,updated_at,reply_queue,correlation_id,"
            "batch_id");
  EXPECT_EQ(columns("audit"),
            "audit_id,domain,command_id,event_type,ts,details_json");
  EXPECT_EQ(columns("payload_archive"),
            "domain,command_id,payload_json,archived_at");
  EXPECT_EQ(columns("process"),
            "domain,process_id,process_type,status,current_step,state,"
            "error_code,error_message,created_at,updated_at,completed_at,"
            "batch_id");
  EXPECT_EQ(columns("process_audit"),
            "id,domain,process_id,step_name,command_id,command_type,"
            "command_data,sent_at,reply_outcome,reply_data,received_at");
}

TEST(ProceduresSchema, NamedIndexesExist) {
  auto conn = test::connect();
  auto res = conn.exec("SELECT indexname FROM pg_indexes"
                       " WHERE schemaname = 'commandbus'");
  std::vector<std::string> names;
  for (int r = 0; r < res.rows(); ++r)
    names.emplace_back(res.text(r, 0));
  for (const char* expected :
       {"uq_command_domain_cmdid", "ix_batch_status", "ix_batch_created",
        "ix_command_status_type", "ix_command_status_created",
        "ix_command_updated", "ix_command_batch", "ix_command_batch_status",
        "ix_audit_cmdid_ts", "idx_process_type", "idx_process_status",
        "idx_process_created", "ix_process_batch_id", "ix_process_batch_status",
        "idx_process_audit_process", "idx_process_audit_command"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end())
      << "missing index " << expected;
  }
}

TEST(ProceduresSchema, ColumnDefaultsMatchTheReference) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = test::new_uuid();
  conn.query("INSERT INTO commandbus.batch (domain, batch_id)"
             " VALUES ($1, $2::uuid)",
             domain, batch_id);
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "PENDING");
  EXPECT_EQ(b.total + b.completed + b.canceled + b.in_tsq + b.failed, 0);
  EXPECT_EQ(conn
              .query("SELECT batch_type FROM commandbus.batch"
                     " WHERE domain = $1 AND batch_id = $2::uuid",
                     domain, batch_id)
              .opt_text(0, 0),
            "COMMAND");
  auto cmd_id = test::new_uuid();
  conn.query("INSERT INTO commandbus.command"
             " (domain, queue_name, command_id, command_type, status,"
             " max_attempts) VALUES ($1, 'q', $2::uuid, 'T', 'PENDING', 3)",
             domain, cmd_id);
  auto res = conn.query("SELECT attempts, reply_queue FROM commandbus.command"
                        " WHERE domain = $1 AND command_id = $2::uuid",
                        domain, cmd_id);
  EXPECT_EQ(res.int64(0, 0), 0);
  EXPECT_EQ(res.text(0, 1), "");
  // (domain, command_id) is the identity of a command.
  try {
    conn.query("INSERT INTO commandbus.command"
               " (domain, queue_name, command_id, command_type, status,"
               " max_attempts) VALUES ($1, 'q', $2::uuid, 'T', 'PENDING', 3)",
               domain, cmd_id);
    FAIL() << "expected a unique violation";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::unique_violation);
  }
  // process_audit rows need their process.
  try {
    conn.query("INSERT INTO commandbus.process_audit"
               " (domain, process_id, step_name, command_id, command_type,"
               " sent_at) VALUES ($1, $2::uuid, 's', $3::uuid, 'T', NOW())",
               domain, test::new_uuid(), test::new_uuid());
    FAIL() << "expected a foreign key violation";
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), db::errc::foreign_key_violation);
  }
}

// -- sp_receive_command -------------------------------------------------------

TEST(ProceduresReceive, ReturnsThePostUpdateRowAndAuditsReceived) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  command_spec spec;
  spec.correlation_id = test::new_uuid();
  spec.reply_queue = domain + "__replies";
  spec.last_error_type = "TRANSIENT";
  spec.last_error_code = "E1";
  spec.last_error_msg = "first try failed";
  auto id = insert_command(conn, domain, spec);

  auto res = receive_defaults(conn, domain, id);
  ASSERT_EQ(res.rows(), 1);
  ASSERT_EQ(res.columns(), 15);
  const char* names[] = {"domain",          "command_id",     "command_type",
                         "status",          "attempts",       "max_attempts",
                         "msg_id",          "correlation_id", "reply_queue",
                         "last_error_type", "last_error_code", "last_error_msg",
                         "created_at",      "updated_at",     "batch_id"};
  for (int c = 0; c < 15; ++c)
    EXPECT_EQ(res.column_name(c), names[c]);
  EXPECT_EQ(res.text(0, 0), domain);
  EXPECT_EQ(res.text(0, 1), id);
  EXPECT_EQ(res.text(0, 2), "TestCommand");
  EXPECT_EQ(res.text(0, 3), "IN_PROGRESS");
  EXPECT_EQ(res.int64(0, 4), 1);
  EXPECT_EQ(res.int64(0, 5), 3);
  EXPECT_EQ(res.int64(0, 6), 7);
  EXPECT_EQ(res.text(0, 7), *spec.correlation_id);
  EXPECT_EQ(res.text(0, 8), spec.reply_queue);
  EXPECT_EQ(res.text(0, 9), "TRANSIENT");
  EXPECT_EQ(res.text(0, 10), "E1");
  EXPECT_EQ(res.text(0, 11), "first try failed");
  EXPECT_TRUE(res.is_null(0, 14));

  auto row = read_command(conn, domain, id);
  EXPECT_EQ(row.status, "IN_PROGRESS");
  EXPECT_EQ(row.attempts, 1);
  EXPECT_TRUE(row.recently_updated);
  EXPECT_EQ(res.text(0, 13), row.updated_at);

  auto trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "RECEIVED");
  EXPECT_TRUE(
    json_eq(conn, trail[0].details, R"({"msg_id":7,"attempt":1,"max_attempts":3})"));

  // Every receive counts an attempt.
  res = receive_defaults(conn, domain, id);
  ASSERT_EQ(res.rows(), 1);
  EXPECT_EQ(res.int64(0, 4), 2);
  trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 2u);
  EXPECT_TRUE(
    json_eq(conn, trail[1].details, R"({"msg_id":7,"attempt":2,"max_attempts":3})"));
}

TEST(ProceduresReceive, PrefersGivenMsgIdAndMaxAttemptsWithoutStoringThem) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto id = insert_command(conn, domain);

  auto res = receive(conn, domain, id, "42", "9", "RUNNING_CUSTOM");
  ASSERT_EQ(res.rows(), 1);
  EXPECT_EQ(res.text(0, res.column("status")), "RUNNING_CUSTOM");
  EXPECT_EQ(res.int64(0, res.column("msg_id")), 42);
  EXPECT_EQ(res.int64(0, res.column("max_attempts")), 9);
  auto trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_TRUE(json_eq(conn, trail[0].details,
                      R"({"msg_id":42,"attempt":1,"max_attempts":9})"));

  auto row = read_command(conn, domain, id);
  EXPECT_EQ(row.status, "RUNNING_CUSTOM");
  EXPECT_EQ(row.msg_id, "7");
  EXPECT_EQ(row.max_attempts, 3);
}

TEST(ProceduresReceive, NullStoredMsgIdGivesNullInResultAndAudit) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  command_spec spec;
  spec.msg_id = std::nullopt;
  auto id = insert_command(conn, domain, spec);

  auto res = receive_defaults(conn, domain, id);
  ASSERT_EQ(res.rows(), 1);
  EXPECT_TRUE(res.is_null(0, res.column("msg_id")));
  auto trail = audit_trail(conn, domain, id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_TRUE(json_eq(conn, trail[0].details,
                      R"({"msg_id":null,"attempt":1,"max_attempts":3})"));
}

TEST(ProceduresReceive, EmptyForUnknownCompletedAndCanceledCommands) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  EXPECT_EQ(receive_defaults(conn, domain, test::new_uuid()).rows(), 0);
  // The same command id in another domain is another command.
  auto other_domain = test::unique_name("d");
  auto foreign = insert_command(conn, other_domain);
  EXPECT_EQ(receive_defaults(conn, domain, foreign).rows(), 0);
  EXPECT_EQ(read_command(conn, other_domain, foreign).attempts, 0);

  for (const char* status : {"COMPLETED", "CANCELED"}) {
    command_spec spec;
    spec.status = status;
    spec.attempts = 2;
    auto id = insert_command(conn, domain, spec);
    EXPECT_EQ(receive_defaults(conn, domain, id).rows(), 0) << status;
    auto row = read_command(conn, domain, id);
    EXPECT_EQ(row.status, status);
    EXPECT_EQ(row.attempts, 2);
    EXPECT_FALSE(row.recently_updated);
    EXPECT_TRUE(audit_trail(conn, domain, id).empty()) << status;
  }
}

TEST(ProceduresReceive, ReReceivesFailedAndTroubleshootingRows) {
  // Reference behaviour: sp_receive_command guards only COMPLETED and
  // CANCELED; our workers skip the other terminal states before it
  // (docs/design.md, "Receive guard").
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  for (const char* status : {"FAILED", "IN_TROUBLESHOOTING_QUEUE", "PENDING"}) {
    command_spec spec;
    spec.status = status;
    spec.attempts = 3;
    auto id = insert_command(conn, domain, spec);
    auto res = receive_defaults(conn, domain, id);
    ASSERT_EQ(res.rows(), 1) << status;
    EXPECT_EQ(res.text(0, res.column("status")), "IN_PROGRESS");
    EXPECT_EQ(res.int64(0, res.column("attempts")), 4);
    EXPECT_EQ(audit_events(conn, domain, id),
              std::vector<std::string>{"RECEIVED"});
  }
}

TEST(ProceduresReceive, StartsTheBatchOnceOnTheFirstReceive) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  auto batch_id = insert_batch(conn, domain, 2);
  command_spec spec;
  spec.batch_id = batch_id;
  auto first = insert_command(conn, domain, spec);
  auto second = insert_command(conn, domain, spec);

  auto res = receive_defaults(conn, domain, first);
  ASSERT_EQ(res.rows(), 1);
  EXPECT_EQ(res.text(0, res.column("batch_id")), batch_id);
  auto b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  ASSERT_TRUE(b.started_at);
  auto started_at = *b.started_at;
  auto trail = audit_trail(conn, domain, batch_id);
  ASSERT_EQ(trail.size(), 1u);
  EXPECT_EQ(trail[0].event_type, "BATCH_STARTED");
  EXPECT_TRUE(json_eq(conn, trail[0].details,
                      R"({"batch_id":")" + batch_id + R"("})"));

  ASSERT_EQ(receive_defaults(conn, domain, second).rows(), 1);
  ASSERT_EQ(receive_defaults(conn, domain, first).rows(), 1);
  b = read_batch(conn, domain, batch_id);
  EXPECT_EQ(b.status, "IN_PROGRESS");
  EXPECT_EQ(b.started_at, started_at);
  EXPECT_EQ(audit_events(conn, domain, batch_id),
            std::vector<std::string>{"BATCH_STARTED"});
  // Receiving never touches the counters.
  EXPECT_EQ(b.completed + b.canceled + b.in_tsq + b.failed, 0);
}

TEST(ProceduresReceive, BatchIdWithoutBatchRowIsNoError) {
  auto conn = test::connect();
  auto domain = test::unique_name("d");
  command_spec spec;
  spec.batch_id = test::new_uuid();
  auto id = insert_command(conn, domain, spec);
  EXPECT_EQ(receive_defaults(conn, domain, id).rows(), 1);
  EXPECT_TRUE(audit_trail(conn, domain, *spec.batch_id).empty());
}
