#include "cmdbus/process/store.hpp"

#include <utility>

#include "cmdbus/db/prepared_command.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/rows.hpp"
#include "cmdbus/db/send_statement.hpp"
#include "cmdbus/db/transaction.hpp"
#include "cmdbus/model/errors.hpp"

namespace cmdbus {

namespace {

// The columns of commandbus.process that `to_process` decodes, in its
// order.
constexpr const char* process_columns
  = "domain, process_id, process_type, status, current_step, state, "
    "error_code, error_message, created_at, updated_at, completed_at, "
    "batch_id";

process_status status_at(const db::result& r, int row, int col) {
  auto text = std::string{r.text(row, col)};
  auto x = parse_process_status(text);
  if (!x)
    throw command_bus_error("unknown process status " + db::printable(text));
  return *x;
}

process_metadata to_process(const db::result& r, int i) {
  process_metadata p;
  p.domain = std::string{r.text(i, 0)};
  p.process_id = db::uuid_at(r, i, 1);
  p.process_type = std::string{r.text(i, 2)};
  p.status = status_at(r, i, 3);
  p.current_step = r.opt_text(i, 4);
  p.state = db::opt_json_at(r, i, 5).value_or(json::object());
  p.error_code = r.opt_text(i, 6);
  p.error_message = r.opt_text(i, 7);
  p.created_at = db::time_at(r, i, 8);
  p.updated_at = db::time_at(r, i, 9);
  p.completed_at = db::opt_time_at(r, i, 10);
  p.batch_id = db::opt_uuid_at(r, i, 11);
  return p;
}

std::vector<process_audit_entry> to_trail(const db::result& r) {
  std::vector<process_audit_entry> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) {
    process_audit_entry e;
    e.step_name = std::string{r.text(i, 0)};
    e.command_id = db::uuid_at(r, i, 1);
    e.command_type = std::string{r.text(i, 2)};
    e.command_data = db::opt_json_at(r, i, 3);
    e.sent_at = db::time_at(r, i, 4);
    if (!r.is_null(i, 5)) {
      auto text = std::string{r.text(i, 5)};
      e.outcome = parse_reply_outcome(text);
      if (!e.outcome)
        throw command_bus_error("unknown reply outcome " + db::printable(text));
    }
    e.reply_data = db::opt_json_at(r, i, 6);
    e.received_at = db::opt_time_at(r, i, 7);
    out.push_back(std::move(e));
  }
  return out;
}

db::param json_param(const std::optional<json>& x) {
  if (!x)
    return std::nullopt;
  return x->text();
}

// The statements that send the command of `s` for process `process_id`
// and write its process_audit row (what the reference's step execution
// writes); `sent` is the command they send.
std::vector<db::connection::statement>
step_statements(const process_store_options& opts, const std::string& domain,
                const uuid& process_id, const std::string& reply_queue,
                const step_send& s, db::prepared_command& sent) {
  send_request req;
  req.domain = domain;
  req.command_type = s.command.command_type;
  req.command_id = uuid::random();
  req.data = s.command.data;
  req.correlation_id = process_id;
  req.reply_to = reply_queue;
  sent = db::prepare(req, opts.default_max_attempts);
  std::vector<db::connection::statement> out;
  out.push_back(db::send_statement(sent));
  out.push_back(
    {"INSERT INTO commandbus.process_audit (domain, process_id, "
     "step_name, command_id, command_type, command_data, sent_at) "
     "VALUES ($1, $2::uuid, $3, $4::uuid, $5, $6::jsonb, "
     "clock_timestamp())",
     {domain, process_id.to_string(), s.step, req.command_id.to_string(),
      req.command_type, req.data.text()},
     "cmdbus_process_step"});
  return out;
}

// The statement that applies `deltas` to their batches (summed per batch)
// with the rules of the inline counters and records the completion of each
// batch this finished for callback delivery, as the worker does.
db::connection::statement
batch_statement(const std::string& domain,
                const std::vector<std::pair<uuid, batch_delta>>& deltas) {
  std::vector<std::string> ids;
  std::vector<int64_t> completed, canceled, tsq, zero;
  for (auto& [id, d] : deltas) {
    ids.push_back(id.to_string());
    completed.push_back(d.completed);
    canceled.push_back(d.canceled);
    tsq.push_back(d.in_troubleshooting);
    zero.push_back(0);
  }
  return {"INSERT INTO commandbus.cmdbus_batch_delivery (domain, batch_id) "
          "SELECT $1, d.batch_id FROM "
          "commandbus.cmdbus_apply_batch_deltas($1, $2::uuid[], $3::int[], "
          "$4::int[], $5::int[], $6::int[]) d WHERE d.batch_complete "
          "ON CONFLICT DO NOTHING",
          {domain, db::array_literal(ids), db::array_literal(completed),
           db::array_literal(zero), db::array_literal(canceled),
           db::array_literal(tsq)},
          "cmdbus_process_batch"};
}

// Runs `sts` in one round trip (inside the transaction open on `conn`) and
// returns their results; the send among them, if any, is checked.
std::vector<db::result>
run_all(db::connection& conn, const std::vector<db::connection::statement>& sts,
        const std::optional<std::pair<size_t, db::prepared_command>>& send) {
  if (sts.empty())
    return {};
  auto results = conn.pipeline(sts);
  if (send)
    db::sent(send->second, results[send->first]);
  return results;
}

} // namespace

process_store::process_store(process_store_options opts) : opts_(opts) {
  // nop
}

uuid process_store::start(db::connection& conn, const workflow& w,
                          const std::string& domain, const json& input,
                          const std::string& reply_queue,
                          const std::optional<uuid>& batch_id) const {
  db::validate_domain(domain);
  db::validate_queue_name(reply_queue);
  auto state = w.initial_state(input);
  auto first = w.first_step(state);
  step_send s{first, w.command_for(first, state)};
  auto process_id = uuid::random();
  return db::in_transaction(conn, [&](db::connection&) {
    if (batch_id) {
      auto b = conn.query("SELECT batch_type, status FROM commandbus.batch "
                          "WHERE domain = $1 AND batch_id = $2::uuid",
                          domain, batch_id->to_string());
      if (b.rows() == 0)
        throw batch_not_found_error(domain, *batch_id);
      if (b.text(0, 0) != "PROCESS")
        throw invalid_operation_error("batch " + batch_id->to_string()
                                      + " is not a PROCESS batch");
      if (b.text(0, 1) == "PENDING")
        conn.query("SELECT commandbus.sp_start_batch($1, $2::uuid)", domain,
                   batch_id->to_string());
    }
    // The row the reference leaves after its start (inserted PENDING, then
    // updated to WAITING at the first step), written at once.
    std::vector<db::connection::statement> sts;
    sts.push_back(
      {"INSERT INTO commandbus.process (domain, process_id, process_type, "
       "status, current_step, state, error_code, error_message, created_at, "
       "updated_at, completed_at, batch_id) VALUES ($1, $2::uuid, $3, "
       "'WAITING', $4, $5::jsonb, NULL, NULL, NOW(), NOW(), NULL, $6::uuid)",
       {domain, process_id.to_string(), w.process_type(), first, state.text(),
        batch_id ? db::param{batch_id->to_string()} : db::param{}}});
    db::prepared_command sent;
    auto step = step_statements(opts_, domain, process_id, reply_queue, s,
                                sent);
    sts.insert(sts.end(), step.begin(), step.end());
    run_all(conn, sts, std::make_pair(size_t{1}, sent));
    return process_id;
  });
}

std::optional<process_metadata>
process_store::get(db::connection& conn, const std::string& domain,
                   const uuid& process_id) const {
  auto r = conn.query(std::string{"SELECT "} + process_columns
                        + " FROM commandbus.process WHERE domain = $1 AND "
                          "process_id = $2::uuid",
                      domain, process_id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  return to_process(r, 0);
}

std::vector<process_metadata>
process_store::list(db::connection& conn, const std::string& domain,
                    const process_query& q) const {
  db::param statuses;
  if (!q.statuses.empty()) {
    std::vector<std::string> xs;
    for (auto s : q.statuses)
      xs.emplace_back(to_string(s));
    statuses = db::array_literal(xs);
  }
  auto r = conn.query(std::string{"SELECT "} + process_columns
                        + " FROM commandbus.process WHERE domain = $1 AND "
                          "($2::text[] IS NULL OR status = ANY($2::text[])) "
                          "AND ($3::text IS NULL OR process_type = $3) "
                          "ORDER BY created_at DESC, process_id LIMIT $4",
                      domain, statuses, db::to_param(q.process_type),
                      std::max(0, q.limit));
  std::vector<process_metadata> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(to_process(r, i));
  return out;
}

namespace {

// The audit trail of a process in order (also the store's own read).
constexpr const char* trail_sql
  = "SELECT step_name, command_id, command_type, command_data, sent_at, "
    "reply_outcome, reply_data, received_at FROM commandbus.process_audit "
    "WHERE domain = $1 AND process_id = $2::uuid ORDER BY sent_at, id";

} // namespace

std::vector<process_audit_entry>
process_store::audit_trail(db::connection& conn, const std::string& domain,
                           const uuid& process_id) const {
  return to_trail(conn.query(trail_sql, domain, process_id.to_string()));
}

transition process_store::apply(db::connection& conn, const std::string& domain,
                                const uuid& process_id, const reply& r,
                                const workflow& w) const {
  return apply(conn, domain, process_id, r,
               [&w](const std::string&) { return &w; });
}

transition process_store::apply(db::connection& conn, const std::string& domain,
                                const uuid& process_id, const reply& r,
                                const workflow_lookup& lookup) const {
  return db::in_transaction(conn, [&](db::connection&) {
    // The process (locked), the reply queue of its commands, and its trail,
    // in one round trip. The trail is a statement of its own, after the
    // lock: a reply applied by whoever held the lock before is visible to
    // it (read committed), so a concurrent copy of a reply applies once.
    std::vector<db::connection::statement> reads;
    reads.push_back(
      {std::string{"SELECT "} + process_columns
         + ", (SELECT c.reply_queue FROM commandbus.process_audit a JOIN "
           "commandbus.command c ON c.domain = a.domain AND c.command_id = "
           "a.command_id WHERE a.domain = $1 AND a.process_id = $2::uuid "
           "ORDER BY a.sent_at DESC, a.id DESC LIMIT 1) FROM "
           "commandbus.process WHERE domain = $1 AND process_id = $2::uuid "
           "FOR UPDATE",
       {domain, process_id.to_string()},
       "cmdbus_process_lock"});
    reads.push_back(
      {trail_sql, {domain, process_id.to_string()}, "cmdbus_process_trail"});
    auto got = conn.pipeline(reads);
    if (got[0].rows() == 0) {
      transition t;
      t.disposition = reply_disposition::unknown_process;
      t.outcome = r.outcome;
      return t;
    }
    auto p = to_process(got[0], 0);
    auto* w = lookup(p.process_type);
    if (w == nullptr)
      throw unknown_workflow_error("no workflow for process type "
                                   + p.process_type + " is registered here");
    auto reply_queue = got[0].opt_text(0, 12);
    auto trail = to_trail(got[1]);
    auto t = decide(p, trail, r, *w);
    // The writes, in one round trip.
    std::vector<db::connection::statement> writes;
    if (t.record_reply)
      writes.push_back(
        {"UPDATE commandbus.process_audit SET reply_outcome = $4, reply_data "
         "= $5::jsonb, received_at = clock_timestamp() WHERE domain = $1 AND "
         "process_id = $2::uuid AND command_id = $3::uuid AND reply_outcome "
         "IS NULL",
         {domain, process_id.to_string(), r.command_id.to_string(),
          std::string{to_string(r.outcome)}, json_param(t.reply_data)},
         "cmdbus_process_reply"});
    std::optional<std::pair<size_t, db::prepared_command>> send;
    if (t.changed()) {
      writes.push_back(
        {"UPDATE commandbus.process SET status = $3, current_step = $4, "
         "state = $5::jsonb, error_code = $6, error_message = $7, updated_at "
         "= NOW(), completed_at = CASE WHEN $8::boolean THEN NOW() ELSE "
         "completed_at END WHERE domain = $1 AND process_id = $2::uuid",
         {domain, process_id.to_string(), std::string{to_string(t.status)},
          t.current_step, t.state.text(), t.error_code, t.error_message,
          db::to_param(t.completed)},
         "cmdbus_process_update"});
      if (t.send) {
        if (!reply_queue || reply_queue->empty())
          throw invalid_operation_error("process " + process_id.to_string()
                                        + " has no reply queue");
        db::prepared_command sent;
        auto step = step_statements(opts_, domain, process_id, *reply_queue,
                                    *t.send, sent);
        send.emplace(writes.size(), std::move(sent));
        writes.insert(writes.end(), step.begin(), step.end());
      }
      auto d = batch_delta_for(p.status, t.status);
      if (p.batch_id && !d.empty())
        writes.push_back(batch_statement(domain, {{*p.batch_id, d}}));
    }
    run_all(conn, writes, send);
    return t;
  });
}

std::vector<uuid> process_store::mark_waiting_for_tsq(
  db::connection& conn, const std::string& domain,
  const std::optional<std::vector<std::string>>& types) const {
  return db::in_transaction(conn, [&](db::connection&) {
    // The current command of a WAITING process: its audit row of the
    // current step that has no reply yet. Found from the TSQ's commands
    // (few, by the status index), then their audit rows (by command id),
    // then their processes (by key): the cost follows the TSQ, not the
    // number of processes waiting.
    auto r = conn.query(
      "UPDATE commandbus.process p SET status = 'WAITING_FOR_TSQ', "
      "updated_at = NOW() FROM commandbus.command c JOIN "
      "commandbus.process_audit a ON a.domain = c.domain AND a.command_id = "
      "c.command_id WHERE c.status = 'IN_TROUBLESHOOTING_QUEUE' AND "
      "c.domain = $1 AND p.domain = a.domain AND p.process_id = "
      "a.process_id AND p.status = 'WAITING' AND a.step_name = "
      "p.current_step AND a.reply_outcome IS NULL AND ($2::text[] IS NULL "
      "OR p.process_type = ANY($2::text[])) RETURNING p.process_id, "
      "p.batch_id",
      domain, types ? db::param{db::array_literal(*types)} : db::param{});
    std::vector<uuid> out;
    std::vector<std::pair<uuid, batch_delta>> deltas;
    auto d = batch_delta_for(process_status::waiting,
                             process_status::waiting_for_tsq);
    for (int i = 0; i < r.rows(); ++i) {
      out.push_back(db::uuid_at(r, i, 0));
      if (auto batch = db::opt_uuid_at(r, i, 1))
        deltas.emplace_back(*batch, d);
    }
    if (!deltas.empty()) {
      auto st = batch_statement(domain, deltas);
      conn.exec(st.sql, st.params);
    }
    return out;
  });
}

uuid process_store::create_batch(db::connection& conn,
                                 const std::string& domain, int total_count,
                                 const std::optional<std::string>& name,
                                 const std::optional<json>& custom_data,
                                 const std::optional<uuid>& batch_id) const {
  db::validate_domain(domain);
  if (total_count < 0)
    throw command_bus_error("total_count must not be negative");
  auto id = batch_id ? *batch_id : uuid::random();
  auto r = conn.query("INSERT INTO commandbus.batch (domain, batch_id, name, "
                      "custom_data, status, total_count, batch_type) VALUES "
                      "($1, $2::uuid, $3, $4::jsonb, 'PENDING', $5, "
                      "'PROCESS') ON CONFLICT DO NOTHING",
                      domain, id.to_string(), name, json_param(custom_data),
                      total_count);
  if (r.affected_rows() == 0)
    throw invalid_operation_error("batch " + id.to_string()
                                  + " exists in domain " + domain);
  return id;
}

} // namespace cmdbus
