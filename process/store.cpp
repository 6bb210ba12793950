#include "process/store.hpp"

#include <utility>

#include "db/prepared_command.hpp"
#include "db/queue_name.hpp"
#include "db/rows.hpp"
#include "db/send_statement.hpp"
#include "model/errors.hpp"

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

// Runs `fn` inside the transaction open on `conn`, or in one of its own
// (committed after `fn`, rolled back when it throws).
template <class F>
auto in_transaction(db::connection& conn, F fn) {
  if (conn.in_transaction())
    return fn();
  db::transaction tx{conn};
  auto out = fn();
  tx.commit();
  return out;
}

// Sends the command of `step` for process `process_id` and writes its
// process_audit row (what the reference's step execution writes).
void send_step(db::connection& conn, const process_store_options& opts,
               const std::string& domain, const uuid& process_id,
               const std::string& reply_queue, const step_send& s) {
  send_request req;
  req.domain = domain;
  req.command_type = s.command.command_type;
  req.command_id = uuid::random();
  req.data = s.command.data;
  req.correlation_id = process_id;
  req.reply_to = reply_queue;
  db::send_one(db::prepare(req, opts.default_max_attempts), conn);
  conn.query("INSERT INTO commandbus.process_audit (domain, process_id, "
             "step_name, command_id, command_type, command_data, sent_at) "
             "VALUES ($1, $2::uuid, $3, $4::uuid, $5, $6::jsonb, "
             "clock_timestamp())",
             domain, process_id.to_string(), s.step, req.command_id.to_string(),
             req.command_type, req.data.text());
}

// Applies `d` to batch `batch_id` with the rules of the inline counters and
// records its completion for callback delivery when that finished it.
void count_in_batch(db::connection& conn, const std::string& domain,
                    const uuid& batch_id, const batch_delta& d) {
  auto one = [](int x) { return "{" + std::to_string(x) + "}"; };
  auto r = conn.query("SELECT batch_complete FROM "
                      "commandbus.cmdbus_apply_batch_deltas($1, $2::uuid[], "
                      "$3::int[], '{0}'::int[], $4::int[], $5::int[])",
                      domain, "{" + batch_id.to_string() + "}",
                      one(d.completed), one(d.canceled),
                      one(d.in_troubleshooting));
  if (r.rows() > 0 && r.boolean(0, 0))
    conn.query("INSERT INTO commandbus.cmdbus_batch_delivery (domain, "
               "batch_id) VALUES ($1, $2::uuid) ON CONFLICT DO NOTHING",
               domain, batch_id.to_string());
}

// The reply queue of a process: the reply_to of the commands it sent.
std::string reply_queue_of(db::connection& conn, const std::string& domain,
                           const process_audit_entry& last) {
  auto r = conn.query("SELECT reply_queue FROM commandbus.command WHERE "
                      "domain = $1 AND command_id = $2::uuid",
                      domain, last.command_id.to_string());
  if (r.rows() == 0 || r.text(0, 0).empty())
    throw invalid_operation_error(
      "process command " + last.command_id.to_string() + " has no reply queue");
  return std::string{r.text(0, 0)};
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
  return in_transaction(conn, [&] {
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
    conn.query("INSERT INTO commandbus.process (domain, process_id, "
               "process_type, status, current_step, state, error_code, "
               "error_message, created_at, updated_at, completed_at, "
               "batch_id) VALUES ($1, $2::uuid, $3, 'WAITING', $4, $5::jsonb, "
               "NULL, NULL, NOW(), NOW(), NULL, $6::uuid)",
               domain, process_id.to_string(), w.process_type(), first,
               state.text(),
               batch_id ? db::param{batch_id->to_string()} : db::param{});
    send_step(conn, opts_, domain, process_id, reply_queue, s);
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

std::vector<process_audit_entry>
process_store::audit_trail(db::connection& conn, const std::string& domain,
                           const uuid& process_id) const {
  return to_trail(
    conn.query("SELECT step_name, command_id, command_type, command_data, "
               "sent_at, reply_outcome, reply_data, received_at FROM "
               "commandbus.process_audit WHERE domain = $1 AND process_id = "
               "$2::uuid ORDER BY sent_at, id",
               domain, process_id.to_string()));
}

transition process_store::apply(db::connection& conn, const std::string& domain,
                                const uuid& process_id, const reply& r,
                                const workflow& w) const {
  return in_transaction(conn, [&] {
    auto rows = conn.query(std::string{"SELECT "} + process_columns
                             + " FROM commandbus.process WHERE domain = $1 "
                               "AND process_id = $2::uuid FOR UPDATE",
                           domain, process_id.to_string());
    if (rows.rows() == 0) {
      transition t;
      t.disposition = reply_disposition::unknown_process;
      t.outcome = r.outcome;
      return t;
    }
    auto p = to_process(rows, 0);
    auto trail = audit_trail(conn, domain, process_id);
    auto t = decide(p, trail, r, w);
    if (t.record_reply)
      conn.query("UPDATE commandbus.process_audit SET reply_outcome = $4, "
                 "reply_data = $5::jsonb, received_at = clock_timestamp() "
                 "WHERE domain = $1 AND process_id = $2::uuid AND command_id "
                 "= $3::uuid AND reply_outcome IS NULL",
                 domain, process_id.to_string(), r.command_id.to_string(),
                 std::string{to_string(r.outcome)}, json_param(t.reply_data));
    if (!t.changed())
      return t;
    conn.query("UPDATE commandbus.process SET status = $3, current_step = $4, "
               "state = $5::jsonb, error_code = $6, error_message = $7, "
               "updated_at = NOW(), completed_at = CASE WHEN $8::boolean "
               "THEN NOW() ELSE completed_at END WHERE domain = $1 AND "
               "process_id = $2::uuid",
               domain, process_id.to_string(), std::string{to_string(t.status)},
               t.current_step, t.state.text(), t.error_code, t.error_message,
               t.completed);
    if (t.send)
      send_step(conn, opts_, domain, process_id,
                reply_queue_of(conn, domain, trail.back()), *t.send);
    auto d = batch_delta_for(p.status, t.status);
    if (p.batch_id && !d.empty())
      count_in_batch(conn, domain, *p.batch_id, d);
    return t;
  });
}

std::vector<uuid>
process_store::mark_waiting_for_tsq(db::connection& conn,
                                    const std::string& domain) const {
  return in_transaction(conn, [&] {
    // The current command of a WAITING process is its audit row of the
    // current step that has no reply yet.
    auto r = conn.query(
      "UPDATE commandbus.process p SET status = 'WAITING_FOR_TSQ', "
      "updated_at = NOW() WHERE p.domain = $1 AND p.status = 'WAITING' AND "
      "EXISTS (SELECT 1 FROM commandbus.process_audit a JOIN "
      "commandbus.command c ON c.domain = a.domain AND c.command_id = "
      "a.command_id WHERE a.domain = p.domain AND a.process_id = "
      "p.process_id AND a.step_name = p.current_step AND a.reply_outcome IS "
      "NULL AND c.status = 'IN_TROUBLESHOOTING_QUEUE') RETURNING "
      "p.process_id, p.batch_id",
      domain);
    std::vector<uuid> out;
    for (int i = 0; i < r.rows(); ++i) {
      out.push_back(db::uuid_at(r, i, 0));
      if (auto batch = db::opt_uuid_at(r, i, 1))
        count_in_batch(conn, domain, *batch,
                       batch_delta_for(process_status::waiting,
                                       process_status::waiting_for_tsq));
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
