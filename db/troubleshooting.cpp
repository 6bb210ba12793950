// The troubleshooting queue: listings over commandbus.command joined with
// the PGMQ archive, and the operator actions, each one transaction that
// locks the command row before it checks the status (the reference library
// checks before its transaction, without a lock). The rows, audit events,
// replies and batch counters are those the reference writes; see
// docs/tsq.md.

#include "cmdbus/db/troubleshooting.hpp"

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/rows.hpp"
#include "cmdbus/db/transaction.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/model/wire.hpp"

namespace cmdbus {

namespace {

constexpr const char* tsq_status = "IN_TROUBLESHOOTING_QUEUE";

// `pgmq.a_{queue}` (lower case, as PGMQ names it), after validating the
// queue name.
std::string archive_table(const std::string& queue) {
  return "pgmq.a" + db::queue_table(queue).substr(1);
}

// Whether the queue's archive table exists (a domain whose queue was never
// created has none).
bool archive_exists(db::connection& conn, const std::string& queue) {
  return !conn.query("SELECT to_regclass($1)", archive_table(queue))
            .is_null(0, 0);
}

// The latest archived message of a command as JSON text: the expression for
// a select list over `commandbus.command c`, or NULL without an archive.
std::string payload_expr(db::connection& conn, const std::string& domain) {
  auto queue = db::command_queue(domain);
  if (!archive_exists(conn, queue))
    return "NULL::text";
  return "(SELECT a.message::text FROM " + archive_table(queue)
         + " a WHERE a.message->>'command_id' = c.command_id::text ORDER BY "
           "a.msg_id DESC LIMIT 1)";
}

// The WHERE clause of `f` (without ORDER BY / LIMIT) and its parameters.
struct where_clause {
  std::string sql;
  std::vector<db::param> params;
};

where_clause where_of(const tsq_filter& f) {
  db::validate_domain(f.domain);
  where_clause w;
  w.sql = " FROM commandbus.command c WHERE c.domain = $1 AND c.status = $2";
  w.params = {f.domain, std::string{tsq_status}};
  auto add = [&](const std::string& cond, db::param value,
                 const char* cast = "") {
    w.params.push_back(std::move(value));
    w.sql += " AND " + cond + std::to_string(w.params.size()) + cast;
  };
  if (f.command_type)
    add("c.command_type = $", *f.command_type);
  if (f.error_code)
    add("c.last_error_code = $", *f.error_code);
  if (f.batch_id)
    add("c.batch_id = $", f.batch_id->to_string());
  if (f.older_than)
    add("c.updated_at < NOW() - interval '1 millisecond' * $",
        std::to_string(f.older_than->count()), "::bigint");
  return w;
}

// Appends the order, limit and offset of `f`.
void page(where_clause& w, const tsq_filter& f) {
  w.sql += f.oldest_first ? " ORDER BY c.updated_at, c.command_id"
                          : " ORDER BY c.updated_at DESC, c.command_id";
  if (f.limit >= 0) {
    w.params.push_back(std::to_string(f.limit));
    w.sql += " LIMIT $" + std::to_string(w.params.size());
  }
  w.params.push_back(std::to_string(std::max(0, f.offset)));
  w.sql += " OFFSET $" + std::to_string(w.params.size());
}

// The command columns qualified with `c.`, then the payload.
std::string item_select(db::connection& conn, const std::string& domain) {
  std::string cols = db::command_columns;
  std::string out = "SELECT c.";
  for (char ch : cols) {
    out += ch;
    if (ch == ' ')
      out += "c.";
  }
  return out + ", " + payload_expr(conn, domain);
}

troubleshooting_item to_item(const db::result& r, int i) {
  auto m = db::to_command_metadata(r, i);
  troubleshooting_item x;
  x.domain = m.domain;
  x.command_id = m.command_id;
  x.command_type = m.command_type;
  x.status = m.status;
  x.attempts = m.attempts;
  x.max_attempts = m.max_attempts;
  x.last_error_type = m.last_error_type;
  x.last_error_code = m.last_error_code;
  x.last_error_msg = m.last_error_msg;
  x.correlation_id = m.correlation_id;
  x.reply_to = m.reply_to;
  x.batch_id = m.batch_id;
  x.payload = db::opt_json_at(r, i, 15);
  x.created_at = m.created_at;
  x.updated_at = m.updated_at;
  return x;
}

// -- the locked command ------------------------------------------------------

// What an operation needs of the command row it locked.
struct locked_command {
  std::optional<uuid> correlation_id;
  std::optional<std::string> reply_to;
  std::optional<uuid> batch_id;
};

// Locks the command row (inside the caller's transaction) and checks that it
// is in the TSQ.
locked_command lock_in_tsq(db::connection& conn, const std::string& domain,
                           const uuid& id) {
  auto r = conn.query("SELECT status, correlation_id, reply_queue, batch_id "
                      "FROM commandbus.command WHERE domain = $1 AND "
                      "command_id = $2::uuid FOR UPDATE",
                      domain, id.to_string());
  if (r.rows() == 0)
    throw command_not_found_error{domain, id};
  auto status = parse_command_status(r.text(0, 0));
  if (!status)
    throw command_bus_error("unknown command status "
                            + std::string{r.text(0, 0)});
  if (*status != command_status::in_troubleshooting_queue)
    throw not_in_tsq_error{id, *status};
  locked_command out;
  out.correlation_id = db::opt_uuid_at(r, 0, 1);
  if (!r.text(0, 2).empty())
    out.reply_to = std::string{r.text(0, 2)};
  out.batch_id = db::opt_uuid_at(r, 0, 3);
  return out;
}

// Sends `message` to `queue` and notifies its listeners (at commit), as
// every send does; creates the queue first when it does not exist (a reply
// queue nobody created, as the worker's completion does).
int64_t send_and_notify(db::connection& conn, const std::string& queue,
                        const std::string& message) {
  db::create_queue(conn, queue);
  auto id = conn.query("SELECT pgmq.send($1, $2::jsonb, 0)", queue, message)
              .int64(0, 0);
  db::notify(conn, queue);
  return id;
}

void audit(db::connection& conn, const std::string& domain, const uuid& id,
           const char* event, const std::string& details_sql,
           const std::vector<db::param>& details) {
  std::vector<db::param> params{domain, id.to_string(), std::string{event}};
  params.insert(params.end(), details.begin(), details.end());
  conn.exec("INSERT INTO commandbus.audit (domain, command_id, event_type, "
            "details_json) VALUES ($1, $2::uuid, $3, "
              + details_sql + ")",
            params);
}

// Counts the operator's decision in the batch (sp_tsq_cancel or
// sp_tsq_complete) and, when that completed the batch, records it for
// callback delivery like the worker does (V005), in the same transaction.
// A command canceled before it ran was never in the TSQ: `from_pending`
// counts it there first (sp_update_batch_counters' tsq_move, which never
// completes a batch), so that sp_tsq_cancel's pair of changes nets out at
// canceled + 1 with the reference's completion rule.
tsq_result count_in_batch(db::connection& conn, const std::string& domain,
                          const locked_command& cmd, const char* procedure,
                          bool from_pending = false) {
  tsq_result out;
  out.batch_id = cmd.batch_id;
  if (!cmd.batch_id)
    return out;
  if (from_pending)
    conn.query("SELECT commandbus.sp_update_batch_counters($1, $2::uuid, "
               "'tsq_move')",
               domain, cmd.batch_id->to_string());
  out.batch_completed = conn
                          .query(std::string{"SELECT commandbus."} + procedure
                                   + "($1, $2::uuid)",
                                 domain, cmd.batch_id->to_string())
                          .boolean(0, 0);
  if (out.batch_completed)
    conn.query("INSERT INTO commandbus.cmdbus_batch_delivery (domain, "
               "batch_id) VALUES ($1, $2::uuid) ON CONFLICT DO NOTHING",
               domain, cmd.batch_id->to_string());
  return out;
}

std::string printable_operator(const std::optional<std::string>& x) {
  return x ? *x : "(none)";
}

// The part that cancel and complete share: the command `cmd`, locked,
// takes `status` and its reply (if it has a reply_to) is sent with the
// outcome `outcome` filled in by `fill`.
template <class Fill>
void settle_locked(db::connection& conn, const std::string& domain,
                   const uuid& command_id, const locked_command& cmd,
                   const char* status, reply_outcome outcome, Fill fill) {
  conn.query("UPDATE commandbus.command SET status = $3, updated_at = NOW() "
             "WHERE domain = $1 AND command_id = $2::uuid",
             domain, command_id.to_string(), std::string{status});
  if (cmd.reply_to) {
    reply r;
    r.command_id = command_id;
    r.correlation_id = cmd.correlation_id;
    r.outcome = outcome;
    fill(r);
    send_and_notify(conn, *cmd.reply_to, wire::encode_reply(r));
  }
}

// settle_locked for a command in the TSQ, which it locks first.
template <class Fill>
locked_command settle(db::connection& conn, const std::string& domain,
                      const uuid& command_id, const char* status,
                      reply_outcome outcome, Fill fill) {
  auto cmd = lock_in_tsq(conn, domain, command_id);
  settle_locked(conn, domain, command_id, cmd, status, outcome, fill);
  return cmd;
}

// Locks a PENDING command whose message was never read, for a cancel before
// it runs: first its message (FOR UPDATE SKIP LOCKED: a worker claiming it
// holds its lock until the claim commits, and a worker locks the message
// before the command row, so taking them in the same order never waits in
// a cycle with one), then the command row, which must still be PENDING and
// name that message.
locked_command lock_pending(db::connection& conn, const std::string& domain,
                            const std::string& queue, const uuid& id,
                            int64_t& msg_id) {
  auto r = conn.query("SELECT status, msg_id FROM commandbus.command WHERE "
                      "domain = $1 AND command_id = $2::uuid",
                      domain, id.to_string());
  if (r.rows() == 0)
    throw command_not_found_error{domain, id};
  auto status = parse_command_status(r.text(0, 0));
  if (!status)
    throw command_bus_error("unknown command status "
                            + std::string{r.text(0, 0)});
  if (*status != command_status::pending || r.is_null(0, 1))
    throw not_pending_error{id, *status};
  msg_id = r.int64(0, 1);
  auto m = conn.query("SELECT read_ct FROM pgmq." + db::queue_table(queue)
                        + " WHERE msg_id = $1::bigint FOR UPDATE SKIP LOCKED",
                      static_cast<long long>(msg_id));
  if (m.rows() == 0 || m.int64(0, 0) != 0)
    throw not_pending_error{id, command_status::pending};
  auto c = conn.query("SELECT status, correlation_id, reply_queue, batch_id, "
                      "msg_id FROM commandbus.command WHERE domain = $1 AND "
                      "command_id = $2::uuid FOR UPDATE",
                      domain, id.to_string());
  auto now = c.rows() > 0 ? parse_command_status(c.text(0, 0)) : std::nullopt;
  if (!now || *now != command_status::pending || c.is_null(0, 4)
      || c.int64(0, 4) != msg_id)
    throw not_pending_error{id, now.value_or(*status)};
  locked_command out;
  out.correlation_id = db::opt_uuid_at(c, 0, 1);
  if (!c.text(0, 2).empty())
    out.reply_to = std::string{c.text(0, 2)};
  out.batch_id = db::opt_uuid_at(c, 0, 3);
  return out;
}

} // namespace

const char* to_string(tsq_operation::kind x) noexcept {
  switch (x) {
    case tsq_operation::kind::retry: return "retry";
    case tsq_operation::kind::cancel: return "cancel";
    default: return "complete";
  }
}

troubleshooting_queue::troubleshooting_queue(db::pool& pool) : pool_(pool) {
  // nop
}

// -- reads -------------------------------------------------------------------

std::vector<troubleshooting_item>
troubleshooting_queue::list(const tsq_filter& f) {
  auto w = where_of(f);
  page(w, f);
  auto conn = pool_.acquire();
  auto r = conn->exec(item_select(*conn, f.domain) + w.sql, w.params);
  std::vector<troubleshooting_item> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(to_item(r, i));
  return out;
}

int64_t troubleshooting_queue::count(const tsq_filter& f) {
  auto w = where_of(f);
  auto conn = pool_.acquire();
  return conn->exec("SELECT count(*)" + w.sql, w.params).int64(0, 0);
}

std::vector<uuid> troubleshooting_queue::ids(const tsq_filter& f) {
  auto w = where_of(f);
  page(w, f);
  auto conn = pool_.acquire();
  auto r = conn->exec("SELECT c.command_id" + w.sql, w.params);
  std::vector<uuid> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(db::uuid_at(r, i, 0));
  return out;
}

tsq_details troubleshooting_queue::get(const std::string& domain,
                                       const uuid& command_id) {
  db::validate_domain(domain);
  auto conn = pool_.acquire();
  auto r = conn->query(item_select(*conn, domain)
                         + " FROM commandbus.command c WHERE c.domain = $1 "
                           "AND c.command_id = $2::uuid",
                       domain, command_id.to_string());
  if (r.rows() == 0)
    throw command_not_found_error{domain, command_id};
  tsq_details out;
  out.item = to_item(r, 0);
  auto a = conn->query(
    "SELECT event_type, ts, details_json->>'attempt', "
    "details_json->>'reason', details_json->>'error_type', "
    "details_json->>'error_code', details_json->>'error_msg' FROM "
    "commandbus.audit WHERE domain = $1 AND command_id = $2::uuid AND "
    "event_type IN ('FAILED', 'MOVED_TO_TSQ') ORDER BY ts, audit_id",
    domain, command_id.to_string());
  for (int i = 0; i < a.rows(); ++i) {
    tsq_error_event ev;
    ev.event_type = std::string{a.text(i, 0)};
    ev.ts = db::time_at(a, i, 1);
    if (auto attempt = a.opt_text(i, 2)) {
      try {
        ev.attempt = std::stoi(*attempt);
      } catch (const std::exception&) {
        // not a number: left out
      }
    }
    ev.reason = a.opt_text(i, 3);
    ev.error_type = a.opt_text(i, 4);
    ev.error_code = a.opt_text(i, 5);
    ev.error_msg = a.opt_text(i, 6);
    out.errors.push_back(std::move(ev));
  }
  return out;
}

// -- operations --------------------------------------------------------------

int64_t
troubleshooting_queue::retry(const std::string& domain, const uuid& command_id,
                             const std::optional<std::string>& operator_name) {
  auto queue = db::command_queue(domain);
  auto msg_id = db::in_transaction(pool_, [&](db::connection& conn) {
    auto cmd = lock_in_tsq(conn, domain, command_id);
    std::optional<std::string> message;
    if (archive_exists(conn, queue))
      message = conn
                  .query("SELECT message::text FROM " + archive_table(queue)
                           + " WHERE message->>'command_id' = $1 ORDER BY "
                             "msg_id DESC LIMIT 1",
                         command_id.to_string())
                  .opt_text(0, 0);
    if (!message)
      throw invalid_operation_error("no archived message of command "
                                    + command_id.to_string() + " to retry in "
                                    + queue);
    auto new_id = send_and_notify(conn, queue, *message);
    conn.query("UPDATE commandbus.command SET status = 'PENDING', attempts = "
               "0, msg_id = $3::bigint, last_error_type = NULL, "
               "last_error_code = NULL, last_error_msg = NULL, updated_at = "
               "NOW() WHERE domain = $1 AND command_id = $2::uuid",
               domain, command_id.to_string(), static_cast<long long>(new_id));
    audit(conn, domain, command_id, "OPERATOR_RETRY",
          "jsonb_build_object('operator', $4::text, 'new_msg_id', "
          "$5::bigint)",
          {operator_name, std::to_string(new_id)});
    if (cmd.batch_id)
      conn.query("SELECT commandbus.sp_tsq_retry($1, $2::uuid)", domain,
                 cmd.batch_id->to_string());
    return new_id;
  });
  log::info("operator retry of {} in {}: new msg_id {}, operator {}",
            command_id.to_string(), domain, msg_id,
            printable_operator(operator_name));
  return msg_id;
}

tsq_result
troubleshooting_queue::cancel(const std::string& domain, const uuid& command_id,
                              const std::optional<std::string>& reason,
                              const std::optional<std::string>& operator_name) {
  db::validate_domain(domain);
  auto out = db::in_transaction(pool_, [&](db::connection& conn) {
    auto cmd = settle(conn, domain, command_id, "CANCELED",
                      reply_outcome::canceled,
                      [&](reply& r) { r.reason = reason; });
    audit(conn, domain, command_id, "OPERATOR_CANCEL",
          "jsonb_build_object('operator', $4::text, 'reason', $5::text, "
          "'reply_to', $6::text)",
          {operator_name, reason, cmd.reply_to});
    return count_in_batch(conn, domain, cmd, "sp_tsq_cancel");
  });
  log::info("operator cancel of {} in {}: operator {}", command_id.to_string(),
            domain, printable_operator(operator_name));
  return out;
}

tsq_result troubleshooting_queue::cancel_pending(
  const std::string& domain, const uuid& command_id,
  const std::optional<std::string>& reason,
  const std::optional<std::string>& operator_name) {
  auto queue = db::command_queue(domain);
  int64_t msg_id = 0;
  auto out = db::in_transaction(pool_, [&](db::connection& conn) {
    if (!db::queue_exists(conn, queue))
      throw command_not_found_error{domain, command_id};
    auto cmd = lock_pending(conn, domain, queue, command_id, msg_id);
    conn.query("SELECT pgmq.archive($1, $2::bigint)", queue,
               static_cast<long long>(msg_id));
    settle_locked(conn, domain, command_id, cmd, "CANCELED",
                  reply_outcome::canceled,
                  [&](reply& r) { r.reason = reason; });
    audit(conn, domain, command_id, "OPERATOR_CANCEL",
          "jsonb_build_object('operator', $4::text, 'reason', $5::text, "
          "'reply_to', $6::text)",
          {operator_name, reason, cmd.reply_to});
    return count_in_batch(conn, domain, cmd, "sp_tsq_cancel", true);
  });
  log::info("operator cancel of pending {} in {} before it ran: msg_id {} "
            "archived, operator {}",
            command_id.to_string(), domain, msg_id,
            printable_operator(operator_name));
  return out;
}

tsq_result troubleshooting_queue::complete(
  const std::string& domain, const uuid& command_id,
  const std::optional<json>& result,
  const std::optional<std::string>& operator_name) {
  db::validate_domain(domain);
  auto out = db::in_transaction(pool_, [&](db::connection& conn) {
    auto cmd = settle(conn, domain, command_id, "COMPLETED",
                      reply_outcome::success, [&](reply& r) {
                        r.result = result ? *result : json::null();
                      });
    audit(conn, domain, command_id, "OPERATOR_COMPLETE",
          "jsonb_build_object('operator', $4::text, 'has_result_data', "
          "$5::boolean, 'reply_to', $6::text)",
          {operator_name, db::to_param(result.has_value()), cmd.reply_to});
    return count_in_batch(conn, domain, cmd, "sp_tsq_complete");
  });
  log::info("operator complete of {} in {}: operator {}",
            command_id.to_string(), domain, printable_operator(operator_name));
  return out;
}

// -- bulk --------------------------------------------------------------------

tsq_bulk_result troubleshooting_queue::apply(
  const std::string& domain, const std::vector<uuid>& ids,
  const tsq_operation& op,
  const std::function<void(const tsq_item_outcome&)>& on_each) {
  db::validate_domain(domain);
  tsq_bulk_result out;
  out.matched = static_cast<int>(ids.size());
  for (auto& id : ids) {
    tsq_item_outcome x;
    x.command_id = id;
    try {
      switch (op.action) {
        case tsq_operation::kind::retry:
          x.new_msg_id = retry(domain, id, op.operator_name);
          break;
        case tsq_operation::kind::cancel:
          x.batch = cancel(domain, id, op.reason, op.operator_name);
          break;
        case tsq_operation::kind::complete:
          x.batch = complete(domain, id, op.result, op.operator_name);
          break;
      }
      x.outcome = tsq_item_outcome::kind::done;
      ++out.done;
    } catch (const command_not_found_error& e) {
      x.outcome = tsq_item_outcome::kind::not_found;
      x.message = e.what();
      ++out.not_found;
    } catch (const not_in_tsq_error& e) {
      x.outcome = tsq_item_outcome::kind::not_in_tsq;
      x.message = e.what();
      ++out.skipped;
    } catch (const db::error& e) {
      // A lost connection ends the run: the next command would fail the
      // same way. What committed stays committed.
      if (e.code() == db::errc::connection)
        throw;
      x.outcome = tsq_item_outcome::kind::failed;
      x.message = e.what();
      ++out.failed;
    } catch (const std::exception& e) {
      x.outcome = tsq_item_outcome::kind::failed;
      x.message = e.what();
      ++out.failed;
    }
    if (on_each)
      on_each(x);
  }
  return out;
}

tsq_bulk_result troubleshooting_queue::apply(
  const tsq_filter& f, const tsq_operation& op,
  const std::function<void(const tsq_item_outcome&)>& on_each) {
  return apply(f.domain, ids(f), op, on_each);
}

} // namespace cmdbus
