// Tests of the commandbus stored procedures (sql/commandbus/V002) against a
// real PostgreSQL: the transitions and audit rows of the reference's
// procedures with the inline batch counters of its packaged schema (see
// docs/design.md, "Inline batch counters").
//
// Every test works in its own domain, so tests never see each other's rows.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "db/connection.hpp"
#include "db/error.hpp"
#include "tests/support/rows.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

namespace {

using opt_str = std::optional<std::string>;

// -- fixtures -----------------------------------------------------------------

/// A command row to insert; the timestamps lie one hour in the past so that
/// any update by a procedure is visible in updated_at.
struct command_spec {
  std::string status = "PENDING";
  std::optional<int64_t> msg_id = 7;
  int attempts = 0;
  int max_attempts = 3;
  opt_str batch_id;
  opt_str correlation_id;
  std::string reply_queue;
  opt_str last_error_type;
  opt_str last_error_code;
  opt_str last_error_msg;
};

std::string insert_command(db::connection& conn, const std::string& domain,
                           const command_spec& spec = {}) {
  auto id = test::new_uuid();
  conn.query("INSERT INTO commandbus.command"
             " (domain, queue_name, msg_id, command_id, command_type, status,"
             "  attempts, max_attempts, reply_queue, correlation_id, batch_id,"
             "  last_error_type, last_error_code, last_error_msg,"
             "  created_at, updated_at)"
             " VALUES ($1::text, $1::text || '__commands', $2::bigint,"
             "  $3::uuid, 'TestCommand', $4, $5::int, $6::int, $7,"
             "  $8::uuid, $9::uuid, $10, $11, $12,"
             "  NOW() - interval '1 hour', NOW() - interval '1 hour')",
             domain, spec.msg_id, id, spec.status, spec.attempts,
             spec.max_attempts, spec.reply_queue, spec.correlation_id,
             spec.batch_id, spec.last_error_type, spec.last_error_code,
             spec.last_error_msg);
  return id;
}

std::string insert_batch(db::connection& conn, const std::string& domain,
                         int total, const std::string& batch_type = "COMMAND",
                         const std::string& status = "PENDING") {
  auto id = test::new_uuid();
  conn.query("INSERT INTO commandbus.batch"
             " (domain, batch_id, name, status, total_count, batch_type)"
             " VALUES ($1, $2::uuid, 'test batch', $3, $4::int, $5)",
             domain, id, status, total, batch_type);
  return id;
}

std::string insert_process(db::connection& conn, const std::string& domain,
                           const std::string& status, const opt_str& batch_id) {
  auto id = test::new_uuid();
  conn.query("INSERT INTO commandbus.process"
             " (domain, process_id, process_type, status, batch_id)"
             " VALUES ($1, $2::uuid, 'TestProcess', $3, $4::uuid)",
             domain, id, status, batch_id);
  return id;
}

// -- readers ------------------------------------------------------------------

struct command_row {
  std::string status;
  int64_t attempts = 0;
  int64_t max_attempts = 0;
  opt_str msg_id;
  opt_str last_error_type;
  opt_str last_error_code;
  opt_str last_error_msg;
  std::string updated_at;
  bool recently_updated = false;
};

command_row read_command(db::connection& conn, const std::string& domain,
                         const std::string& id) {
  auto res = conn.query(
    "SELECT status, attempts, max_attempts, msg_id, last_error_type,"
    " last_error_code, last_error_msg, updated_at,"
    " updated_at > NOW() - interval '10 minutes'"
    " FROM commandbus.command WHERE domain = $1 AND command_id = $2::uuid",
    domain, id);
  if (res.rows() != 1)
    throw std::runtime_error("command row not found");
  command_row row;
  row.status = std::string{res.text(0, 0)};
  row.attempts = res.int64(0, 1);
  row.max_attempts = res.int64(0, 2);
  row.msg_id = res.opt_text(0, 3);
  row.last_error_type = res.opt_text(0, 4);
  row.last_error_code = res.opt_text(0, 5);
  row.last_error_msg = res.opt_text(0, 6);
  row.updated_at = std::string{res.text(0, 7)};
  row.recently_updated = res.boolean(0, 8);
  return row;
}

using test::read_batch;

struct audit_row {
  std::string event_type;
  opt_str details;
};

/// Returns the audit trail of `id` (a command or batch id) in `domain`,
/// ordered by (ts, audit_id) (docs/design.md, "Audit order").
std::vector<audit_row> audit_trail(db::connection& conn,
                                   const std::string& domain,
                                   const std::string& id) {
  auto res = conn.query("SELECT event_type, details_json::text"
                        " FROM commandbus.audit"
                        " WHERE domain = $1 AND command_id = $2::uuid"
                        " ORDER BY ts, audit_id",
                        domain, id);
  std::vector<audit_row> out;
  for (int r = 0; r < res.rows(); ++r)
    out.push_back({std::string{res.text(r, 0)}, res.opt_text(r, 1)});
  return out;
}

std::vector<std::string> audit_events(db::connection& conn,
                                      const std::string& domain,
                                      const std::string& id) {
  std::vector<std::string> out;
  for (auto& row : audit_trail(conn, domain, id))
    out.push_back(row.event_type);
  return out;
}

/// Compares two JSON documents as jsonb (key order and spacing ignored).
::testing::AssertionResult json_eq(db::connection& conn, const opt_str& actual,
                                   const std::string& expected) {
  if (!actual)
    return ::testing::AssertionFailure() << "details_json is NULL, expected "
                                         << expected;
  if (conn.query("SELECT $1::jsonb = $2::jsonb", *actual, expected)
        .boolean(0, 0))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "details_json " << *actual
                                       << " != expected " << expected;
}

// -- procedure calls ----------------------------------------------------------

db::result receive(db::connection& conn, const std::string& domain,
                   const std::string& id, const opt_str& msg_id = std::nullopt,
                   const opt_str& max_attempts = std::nullopt,
                   const std::string& new_status = "IN_PROGRESS") {
  return conn.query("SELECT * FROM commandbus.sp_receive_command"
                    "($1, $2::uuid, $3, $4::bigint, $5::int)",
                    domain, id, new_status, msg_id, max_attempts);
}

/// Receives with the procedure's defaults for p_new_status, p_msg_id and
/// p_max_attempts (the way the reference worker's SQL relies on them).
db::result receive_defaults(db::connection& conn, const std::string& domain,
                            const std::string& id) {
  return conn.query(
    "SELECT * FROM commandbus.sp_receive_command($1, $2::uuid)", domain, id);
}

struct finish_args {
  std::string status = "COMPLETED";
  std::string event_type = "COMPLETED";
  opt_str error_type;
  opt_str error_code;
  opt_str error_msg;
  opt_str details;
  opt_str batch_id;
};

bool finish(db::connection& conn, const std::string& domain,
            const std::string& id, const finish_args& a) {
  return conn
    .query("SELECT commandbus.sp_finish_command($1, $2::uuid, $3, $4, $5, $6,"
           " $7, $8::jsonb, $9::uuid)",
           domain, id, a.status, a.event_type, a.error_type, a.error_code,
           a.error_msg, a.details, a.batch_id)
    .boolean(0, 0);
}

finish_args completed_in(const std::string& batch_id) {
  finish_args a;
  a.batch_id = batch_id;
  return a;
}

finish_args to_tsq_in(const opt_str& batch_id) {
  finish_args a;
  a.status = "IN_TROUBLESHOOTING_QUEUE";
  a.event_type = "MOVED_TO_TSQ";
  a.error_type = "PERMANENT";
  a.error_code = "BAD";
  a.error_msg = "bad input";
  a.batch_id = batch_id;
  return a;
}

finish_args business_failed_in(const opt_str& batch_id) {
  finish_args a;
  a.status = "FAILED";
  a.event_type = "BUSINESS_RULE_FAILED";
  a.error_type = "BUSINESS_RULE";
  a.error_code = "RULE";
  a.error_msg = "not allowed";
  a.batch_id = batch_id;
  return a;
}

bool update_counters(db::connection& conn, const std::string& domain,
                     const opt_str& batch_id, const opt_str& update_type) {
  return conn
    .query("SELECT commandbus.sp_update_batch_counters($1, $2::uuid, $3)",
           domain, batch_id, update_type)
    .boolean(0, 0);
}

bool call_bool(db::connection& conn, const std::string& function,
               const std::string& domain, const opt_str& batch_id) {
  return conn
    .query("SELECT commandbus." + function + "($1, $2::uuid)", domain, batch_id)
    .boolean(0, 0);
}

int64_t count_events(db::connection& conn, const std::string& domain,
                     const std::string& event_type) {
  return conn
    .query("SELECT count(*) FROM commandbus.audit"
           " WHERE domain = $1 AND event_type = $2",
           domain, event_type)
    .int64(0, 0);
}

void set_command_status(db::connection& conn, const std::string& domain,
                        const std::string& id, const std::string& status) {
  conn.query("UPDATE commandbus.command SET status = $3"
             " WHERE domain = $1 AND command_id = $2::uuid",
             domain, id, status);
}

} // namespace

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
