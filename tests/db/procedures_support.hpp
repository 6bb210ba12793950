#pragma once

// Shared fixtures of the stored-procedure tests
// (tests/db/procedures_*_test.cpp): rows inserted directly, readers of
// command, batch and audit rows, and thin wrappers of the procedure calls.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/error.hpp"
#include "tests/db/audit_support.hpp"
#include "tests/support/rows.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::procedures_test {

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

inline std::string insert_command(db::connection& conn,
                                  const std::string& domain,
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

inline std::string insert_batch(db::connection& conn, const std::string& domain,
                                int total,
                                const std::string& batch_type = "COMMAND",
                                const std::string& status = "PENDING") {
  auto id = test::new_uuid();
  conn.query("INSERT INTO commandbus.batch"
             " (domain, batch_id, name, status, total_count, batch_type)"
             " VALUES ($1, $2::uuid, 'test batch', $3, $4::int, $5)",
             domain, id, status, total, batch_type);
  return id;
}

inline std::string
insert_process(db::connection& conn, const std::string& domain,
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

inline command_row read_command(db::connection& conn, const std::string& domain,
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

using audit_test::audit_events;
using audit_test::audit_row;
using audit_test::audit_trail;
using audit_test::count_events;
using audit_test::json_eq;

// -- procedure calls ----------------------------------------------------------

inline db::result receive(db::connection& conn, const std::string& domain,
                          const std::string& id,
                          const opt_str& msg_id = std::nullopt,
                          const opt_str& max_attempts = std::nullopt,
                          const std::string& new_status = "IN_PROGRESS") {
  return conn.query("SELECT * FROM commandbus.sp_receive_command"
                    "($1, $2::uuid, $3, $4::bigint, $5::int)",
                    domain, id, new_status, msg_id, max_attempts);
}

/// Receives with the procedure's defaults for p_new_status, p_msg_id and
/// p_max_attempts (the way the reference worker's SQL relies on them).
inline db::result receive_defaults(db::connection& conn,
                                   const std::string& domain,
                                   const std::string& id) {
  return conn.query("SELECT * FROM commandbus.sp_receive_command($1, $2::uuid)",
                    domain, id);
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

inline bool finish(db::connection& conn, const std::string& domain,
                   const std::string& id, const finish_args& a) {
  return conn
    .query("SELECT commandbus.sp_finish_command($1, $2::uuid, $3, $4, $5, $6,"
           " $7, $8::jsonb, $9::uuid)",
           domain, id, a.status, a.event_type, a.error_type, a.error_code,
           a.error_msg, a.details, a.batch_id)
    .boolean(0, 0);
}

inline finish_args completed_in(const std::string& batch_id) {
  finish_args a;
  a.batch_id = batch_id;
  return a;
}

inline finish_args to_tsq_in(const opt_str& batch_id) {
  finish_args a;
  a.status = "IN_TROUBLESHOOTING_QUEUE";
  a.event_type = "MOVED_TO_TSQ";
  a.error_type = "PERMANENT";
  a.error_code = "BAD";
  a.error_msg = "bad input";
  a.batch_id = batch_id;
  return a;
}

inline finish_args business_failed_in(const opt_str& batch_id) {
  finish_args a;
  a.status = "FAILED";
  a.event_type = "BUSINESS_RULE_FAILED";
  a.error_type = "BUSINESS_RULE";
  a.error_code = "RULE";
  a.error_msg = "not allowed";
  a.batch_id = batch_id;
  return a;
}

inline bool update_counters(db::connection& conn, const std::string& domain,
                            const opt_str& batch_id,
                            const opt_str& update_type) {
  return conn
    .query("SELECT commandbus.sp_update_batch_counters($1, $2::uuid, $3)",
           domain, batch_id, update_type)
    .boolean(0, 0);
}

inline bool call_bool(db::connection& conn, const std::string& function,
                      const std::string& domain, const opt_str& batch_id) {
  return conn
    .query("SELECT commandbus." + function + "($1, $2::uuid)", domain, batch_id)
    .boolean(0, 0);
}

inline void set_command_status(db::connection& conn, const std::string& domain,
                               const std::string& id,
                               const std::string& status) {
  conn.query("UPDATE commandbus.command SET status = $3"
             " WHERE domain = $1 AND command_id = $2::uuid",
             domain, id, status);
}

} // namespace cmdbus::procedures_test
