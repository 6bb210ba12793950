#include "cmdbus/db/send_statement.hpp"

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/errors.hpp"

namespace cmdbus::db {

namespace {

// The unique index on (domain, command_id) of the reference schema.
constexpr const char* command_key = "uq_command_domain_cmdid";

} // namespace

bool is_duplicate_command(const error& e) {
  return e.sqlstate() == sqlstate_unique_violation
         && e.constraint() == command_key;
}

// One send as one statement, prepared once per queue and connection (the
// connection keeps its plan): the message, the PENDING row, the SENT audit
// and NOTIFY (its channel, `notify_channel(queue)`, a parameter), the writes
// of cmdbus_send_command, without its PL/pgSQL call and its duplicate
// pre-check: the unique index rejects a duplicate (23505) and the statement
// rolls back with the message. The message is inserted into the queue's
// table as pgmq.send(queue, msg, 0) does (PGMQ 1.5: `vt` =
// clock_timestamp(), no headers; the table named by format_table_name), but
// with a cached plan instead of pgmq.send's dynamic SQL, which is planned
// anew on every call. A delayed command's vt is its not-before time when
// that is later (pgmq.send(queue, msg, delay timestamptz)); for the others
// the parameter is NULL, which GREATEST ignores, so their rows are exactly
// those of an undelayed send and the plan is the same statement's. With a batch
// id every write depends on the batch existing: for an unknown batch the
// statement writes nothing and returns no row (where cmdbus_send_command raises
// CB002).
connection::statement send_statement(const prepared_command& p) {
  // p.queue was validated ([A-Za-z0-9_], at most 47 characters), so the
  // statement name fits in 63 bytes and the table name needs no escaping.
  auto sql = "WITH s AS (INSERT INTO pgmq.\"" + queue_table(p.queue)
             + "\" (vt, message) SELECT GREATEST(clock_timestamp(), "
               "$11::timestamptz), $5::jsonb "
               "WHERE $9::uuid IS NULL OR EXISTS (SELECT 1 FROM "
               "commandbus.batch b WHERE b.domain = $1 AND b.batch_id = "
               "$9::uuid) RETURNING msg_id AS id), "
               "c AS (INSERT INTO commandbus.command (domain, queue_name, "
               "msg_id, command_id, command_type, status, attempts, "
               "max_attempts, reply_queue, correlation_id, batch_id) SELECT "
               "$1, $2, s.id, $3::uuid, $4, 'PENDING', 0, $8::int, "
               "COALESCE($7, ''), $6::uuid, $9::uuid FROM s RETURNING msg_id), "
               "a AS (INSERT INTO commandbus.audit (domain, command_id, "
               "event_type, details_json) SELECT $1, $3::uuid, 'SENT', "
               "jsonb_build_object('command_type', $4::text, "
               "'correlation_id', $6::uuid, 'reply_to', $7::text, 'msg_id', "
               "c.msg_id, 'batch_id', $9::uuid) FROM c) "
               "SELECT c.msg_id, pg_notify($10, '') FROM c";
  return {
    std::move(sql),
    {p.domain, p.queue, p.command_id.to_string(), p.command_type, p.message,
     p.correlation_id.to_string(), p.reply_to, to_param(p.max_attempts),
     p.batch_id ? param{p.batch_id->to_string()} : std::nullopt,
     notify_channel(p.queue),
     p.not_before ? param{format_timestamp(*p.not_before)} : std::nullopt},
    "cmdbus_send1_" + p.queue};
}

send_result sent(const prepared_command& p, const result& r) {
  if (r.rows() == 0)
    throw batch_not_found_error(p.domain, p.batch_id ? *p.batch_id : uuid{});
  return {p.command_id, r.int64(0, 0)};
}

send_result send_one(const prepared_command& p, connection& conn) {
  try {
    auto st = send_statement(p);
    return sent(p, conn.exec_prepared(st.name, st.sql, st.params));
  } catch (const error& e) {
    if (is_duplicate_command(e))
      throw duplicate_command_error(p.domain, p.command_id);
    throw;
  }
}

} // namespace cmdbus::db
