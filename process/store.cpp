#include "cmdbus/process/store.hpp"

#include <algorithm>
#include <map>
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

// The trail row `i` of `r`, its columns from `col` on in the order of
// trail_sql (below).
process_audit_entry trail_entry_at(const db::result& r, int i, int col = 0) {
  process_audit_entry e;
  e.step_name = std::string{r.text(i, col)};
  e.command_id = db::uuid_at(r, i, col + 1);
  e.command_type = std::string{r.text(i, col + 2)};
  e.command_data = db::opt_json_at(r, i, col + 3);
  e.sent_at = db::time_at(r, i, col + 4);
  if (!r.is_null(i, col + 5)) {
    auto text = std::string{r.text(i, col + 5)};
    e.outcome = parse_reply_outcome(text);
    if (!e.outcome)
      throw command_bus_error("unknown reply outcome " + db::printable(text));
  }
  e.reply_data = db::opt_json_at(r, i, col + 6);
  e.received_at = db::opt_time_at(r, i, col + 7);
  return e;
}

std::vector<process_audit_entry> to_trail(const db::result& r) {
  std::vector<process_audit_entry> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(trail_entry_at(r, i));
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
  return apply_many(conn, domain, {{process_id, r}}, lookup).front();
}

namespace {

// The statements of a group of replies (apply_many). Plans: they must not
// depend on planner statistics, which know nothing of a domain that is new
// since the last ANALYZE (a custom plan then estimates `domain = 'x'` at
// one row, and a lookup written as a join may then walk the whole domain
// through an index with the domain alone, per process) nor of a fresh
// database. So the ids are the outer side of a nested loop, sorted, and
// each inner side is a subquery that cannot be flattened into a join
// (LIMIT or ORDER BY) and looks its rows up by that id, an outer value
// estimated from the column's distinct count (one row): an index on the id
// (with the domain, or alone) is then the cheapest, whatever the estimate
// for the domain. Rows written are then found by ctid: a process row is
// locked by us until the commit; an audit row is matched again on its
// command id and its empty reply, in case it moved.

// The processes, locked in process_id order, with the reply queue of their
// latest command and their ctids.
constexpr const char* lock_many_sql
  = "SELECT p.domain, p.process_id, p.process_type, p.status, "
    "p.current_step, p.state, p.error_code, p.error_message, p.created_at, "
    "p.updated_at, p.completed_at, p.batch_id, q.reply_queue, p.tid::text "
    "FROM (SELECT DISTINCT $1::text AS domain, x.id FROM unnest($2::uuid[]) "
    "AS x(id) ORDER BY x.id) x CROSS JOIN LATERAL (SELECT p.ctid AS tid, "
    "p.domain, p.process_id, p.process_type, p.status, p.current_step, "
    "p.state, p.error_code, p.error_message, p.created_at, p.updated_at, "
    "p.completed_at, p.batch_id FROM commandbus.process p WHERE p.domain = "
    "x.domain AND p.process_id = x.id ORDER BY p.process_id LIMIT 1 FOR "
    "UPDATE) p LEFT JOIN LATERAL (SELECT c.reply_queue FROM "
    "commandbus.process_audit a JOIN commandbus.command c ON c.domain = "
    "a.domain AND c.command_id = a.command_id WHERE a.domain = x.domain AND "
    "a.process_id = x.id ORDER BY a.sent_at DESC, a.id DESC LIMIT 1) q ON "
    "TRUE";

// Their trails (a statement of its own, after the locks: see apply()),
// each row with its process id and ctid before the columns of trail_sql.
constexpr const char* trail_many_sql
  = "SELECT x.id, a.tid::text, a.step_name, a.command_id, a.command_type, "
    "a.command_data, a.sent_at, a.reply_outcome, a.reply_data, "
    "a.received_at FROM (SELECT DISTINCT $1::text AS domain, x.id FROM "
    "unnest($2::uuid[]) AS x(id) ORDER BY x.id) x CROSS JOIN LATERAL (SELECT "
    "a.ctid AS tid, a.id AS row_id, a.step_name, a.command_id, "
    "a.command_type, a.command_data, a.sent_at, a.reply_outcome, "
    "a.reply_data, a.received_at FROM commandbus.process_audit a WHERE "
    "a.domain = x.domain AND a.process_id = x.id ORDER BY a.sent_at, a.id) a "
    "ORDER BY x.id, a.sent_at, a.row_id";

// The replies recorded in their commands' audit rows.
constexpr const char* record_many_sql
  = "UPDATE commandbus.process_audit a SET reply_outcome = f.outcome, "
    "reply_data = f.data, received_at = clock_timestamp() FROM "
    "unnest($1::tid[], $2::uuid[], $3::text[], $4::jsonb[]) AS f(tid, cid, "
    "outcome, data) WHERE a.ctid = f.tid AND a.command_id = f.cid AND "
    "a.reply_outcome IS NULL";

// The processes moved on.
constexpr const char* update_many_sql
  = "UPDATE commandbus.process p SET status = f.status, current_step = "
    "f.step, state = f.state, error_code = f.error_code, error_message = "
    "f.error_message, updated_at = NOW(), completed_at = CASE WHEN "
    "f.completed THEN NOW() ELSE p.completed_at END FROM unnest($1::tid[], "
    "$2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], "
    "$7::boolean[]) AS f(tid, status, step, state, error_code, "
    "error_message, completed) WHERE p.ctid = f.tid";

// The next commands (the bus's set-based send of one domain: one message
// each, the PENDING rows, the SENT audits, one NOTIFY) ...
constexpr const char* send_many_sql
  = "SELECT count(*) FROM commandbus.cmdbus_send_commands($1, $2, "
    "$3::uuid[], $4::text[], $5::jsonb[], $6::uuid[], $7::text[], "
    "$8::int[], $9::uuid[])";

// ... and their process_audit rows.
constexpr const char* step_many_sql
  = "INSERT INTO commandbus.process_audit (domain, process_id, step_name, "
    "command_id, command_type, command_data, sent_at) SELECT $1, x.pid, "
    "x.step, x.cid, x.ctype, x.data, clock_timestamp() FROM "
    "unnest($2::uuid[], $3::text[], $4::uuid[], $5::text[], $6::jsonb[]) AS "
    "x(pid, step, cid, ctype, data)";

// The writes of a group, as parallel arrays.
struct group_writes {
  // Replies recorded.
  std::vector<std::string> reply_tids, reply_cids, reply_outcomes;
  std::vector<std::optional<std::string>> reply_data;
  // Processes updated.
  std::vector<std::string> tids, statuses, states, completed;
  std::vector<std::optional<std::string>> steps, error_codes, error_messages;
  // Commands sent.
  std::vector<db::prepared_command> sends;
  std::vector<std::string> send_pids, send_steps, send_data;
  // Batch counters.
  std::vector<std::pair<uuid, batch_delta>> deltas;
};

std::optional<std::string> opt_text(const std::optional<json>& x) {
  if (!x)
    return std::nullopt;
  return x->text();
}

// The statements writing `w` (none when there is nothing to write), with
// the index of the send among them, if any.
std::vector<db::connection::statement>
write_statements(const std::string& domain, const group_writes& w,
                 std::optional<size_t>& send_at) {
  std::vector<db::connection::statement> out;
  if (!w.reply_tids.empty())
    out.push_back(
      {record_many_sql,
       {db::array_literal(w.reply_tids), db::array_literal(w.reply_cids),
        db::array_literal(w.reply_outcomes), db::array_literal(w.reply_data)},
       "cmdbus_process_record_many"});
  if (!w.tids.empty())
    out.push_back(
      {update_many_sql,
       {db::array_literal(w.tids), db::array_literal(w.statuses),
        db::array_literal(w.steps), db::array_literal(w.states),
        db::array_literal(w.error_codes), db::array_literal(w.error_messages),
        db::array_literal(w.completed)},
       "cmdbus_process_update_many"});
  if (!w.sends.empty()) {
    std::vector<std::string> ids, types, messages, correlations;
    std::vector<std::optional<std::string>> reply_tos, batches;
    std::vector<int64_t> attempts;
    for (auto& c : w.sends) {
      ids.push_back(c.command_id.to_string());
      types.push_back(c.command_type);
      messages.push_back(c.message);
      correlations.push_back(c.correlation_id.to_string());
      reply_tos.push_back(c.reply_to);
      attempts.push_back(c.max_attempts);
      batches.emplace_back(std::nullopt);
    }
    send_at = out.size();
    out.push_back(
      {send_many_sql,
       {domain, w.sends.front().queue, db::array_literal(ids),
        db::array_literal(types), db::array_literal(messages),
        db::array_literal(correlations), db::array_literal(reply_tos),
        db::array_literal(attempts), db::array_literal(batches)},
       "cmdbus_process_send_many"});
    out.push_back({step_many_sql,
                   {domain, db::array_literal(w.send_pids),
                    db::array_literal(w.send_steps), db::array_literal(ids),
                    db::array_literal(types), db::array_literal(w.send_data)},
                   "cmdbus_process_step_many"});
  }
  if (!w.deltas.empty())
    out.push_back(batch_statement(domain, w.deltas));
  return out;
}

} // namespace

std::vector<transition>
process_store::apply_many(db::connection& conn, const std::string& domain,
                          const std::vector<process_reply>& replies,
                          const workflow_lookup& lookup) const {
  if (replies.empty())
    return {};
  std::vector<std::string> ids;
  {
    std::vector<uuid> sorted;
    for (auto& x : replies)
      sorted.push_back(x.process_id);
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      throw invalid_operation_error("apply_many: a process has two replies "
                                    "in one group");
    for (auto& id : sorted)
      ids.push_back(id.to_string());
  }
  auto ids_param = db::array_literal(ids);
  return db::in_transaction(conn, [&](db::connection&) {
    // The processes (locked) and then their trails, in one round trip.
    auto got = conn.pipeline(
      {{lock_many_sql, {domain, ids_param}, "cmdbus_process_lock_many"},
       {trail_many_sql, {domain, ids_param}, "cmdbus_process_trail_many"}});
    auto& rows = got[0];
    auto& trail_rows = got[1];
    std::map<uuid, int> row_of;
    for (int i = 0; i < rows.rows(); ++i)
      row_of.emplace(db::uuid_at(rows, i, 1), i);
    struct trail_of {
      std::vector<process_audit_entry> entries;
      std::vector<std::string> tids;
    };
    std::map<uuid, trail_of> trails;
    for (int i = 0; i < trail_rows.rows(); ++i) {
      auto& t = trails[db::uuid_at(trail_rows, i, 0)];
      t.tids.emplace_back(trail_rows.text(i, 1));
      t.entries.push_back(trail_entry_at(trail_rows, i, 2));
    }
    // The decisions (nothing is written before all are made: a workflow
    // that throws leaves the whole group unwritten) ...
    std::vector<transition> out;
    out.reserve(replies.size());
    group_writes w;
    for (auto& [process_id, r] : replies) {
      auto row = row_of.find(process_id);
      if (row == row_of.end()) {
        transition t;
        t.disposition = reply_disposition::unknown_process;
        t.outcome = r.outcome;
        out.push_back(std::move(t));
        continue;
      }
      auto p = to_process(rows, row->second);
      auto* wf = lookup(p.process_type);
      if (wf == nullptr)
        throw unknown_workflow_error("no workflow for process type "
                                     + p.process_type + " is registered here");
      auto& trail = trails[process_id];
      auto t = decide(p, trail.entries, r, *wf);
      if (t.record_reply) {
        // Every row of the command without a reply (one in our trails).
        for (size_t i = 0; i < trail.entries.size(); ++i)
          if (trail.entries[i].command_id == r.command_id
              && !trail.entries[i].outcome) {
            w.reply_tids.push_back(trail.tids[i]);
            w.reply_cids.push_back(r.command_id.to_string());
            w.reply_outcomes.emplace_back(to_string(r.outcome));
            w.reply_data.push_back(opt_text(t.reply_data));
          }
      }
      if (t.changed()) {
        w.tids.emplace_back(rows.text(row->second, 13));
        w.statuses.emplace_back(to_string(t.status));
        w.steps.push_back(t.current_step);
        w.states.push_back(t.state.text());
        w.error_codes.push_back(t.error_code);
        w.error_messages.push_back(t.error_message);
        w.completed.emplace_back(t.completed ? "t" : "f");
        if (t.send) {
          auto reply_queue = rows.opt_text(row->second, 12);
          if (!reply_queue || reply_queue->empty())
            throw invalid_operation_error("process " + process_id.to_string()
                                          + " has no reply queue");
          send_request req;
          req.domain = domain;
          req.command_type = t.send->command.command_type;
          req.command_id = uuid::random();
          req.data = t.send->command.data;
          req.correlation_id = process_id;
          req.reply_to = *reply_queue;
          w.sends.push_back(db::prepare(req, opts_.default_max_attempts));
          w.send_pids.push_back(process_id.to_string());
          w.send_steps.push_back(t.send->step);
          w.send_data.push_back(req.data.text());
        }
        auto d = batch_delta_for(p.status, t.status);
        if (p.batch_id && !d.empty())
          w.deltas.emplace_back(*p.batch_id, d);
      }
      out.push_back(std::move(t));
    }
    // ... and the writes, in one round trip.
    std::optional<size_t> send_at;
    auto sts = write_statements(domain, w, send_at);
    if (!sts.empty()) {
      auto results = conn.pipeline(sts);
      if (send_at
          && results[*send_at].int64(0, 0)
               != static_cast<int64_t>(w.sends.size()))
        throw command_bus_error("the next commands of " + domain
                                + "'s processes were not all sent");
    }
    return out;
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
