// The command bus's API: construction, queues, single sends and the reads
// of commands and audits. Bulk sends are in db/send_batch.cpp, batches in
// db/batches.cpp.

#include "cmdbus/db/command_bus.hpp"

#include <algorithm>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/rows.hpp"
#include "cmdbus/db/send_statement.hpp"

namespace cmdbus {

command_bus::command_bus(db::pool& pool, command_bus_options opts)
  : pool_(pool), opts_(opts),
    combiner_(
      std::max<size_t>(1, opts.chunk_size), opts.max_concurrent_sends,
      [this](const db::send_combiner::group& g) { send_together(g); },
      [this](const db::prepared_command& p) {
        auto conn = pool_.acquire();
        return db::send_one(p, *conn);
      }) {
  if (opts_.chunk_size == 0)
    opts_.chunk_size = 1;
}

db::prepared_command command_bus::prepare(const send_request& req) const {
  return db::prepare(req, opts_.default_max_attempts);
}

// -- queues ------------------------------------------------------------------

void command_bus::ensure_queue(const std::string& queue) {
  db::validate_queue_name(queue);
  {
    std::lock_guard<std::mutex> guard{queues_mtx_};
    if (queues_.count(queue) > 0)
      return;
  }
  // Created outside any caller transaction, so that a caller's rollback
  // cannot undo a queue this bus believes exists.
  auto conn = pool_.acquire();
  db::create_queue(*conn, queue);
  std::lock_guard<std::mutex> guard{queues_mtx_};
  queues_.insert(queue);
}

void command_bus::ensure_queues(
  const std::vector<db::prepared_command>& items) {
  std::set<std::string> wanted;
  for (auto& p : items) {
    wanted.insert(p.queue);
    if (p.reply_to)
      wanted.insert(*p.reply_to);
  }
  for (auto& q : wanted)
    ensure_queue(q);
}

// -- send --------------------------------------------------------------------

send_result command_bus::send(const send_request& req) {
  auto p = prepare(req);
  ensure_queues({p});
  return combiner_.send(std::move(p));
}

send_result command_bus::send(const send_request& req, db::connection& conn) {
  auto p = prepare(req);
  ensure_queues({p});
  return db::send_one(p, conn);
}

// A group of concurrent sends as one transaction of single-command
// statements in one round trip.
void command_bus::send_together(const db::send_combiner::group& group) {
  auto conn = pool_.acquire();
  std::vector<db::connection::statement> sts;
  sts.reserve(group.size() + 2);
  sts.push_back({"BEGIN", {}});
  for (auto& member : group)
    sts.push_back(db::send_statement(member->item));
  sts.push_back({"COMMIT", {}});
  std::vector<db::result> results;
  try {
    results = conn->pipeline(sts);
  } catch (...) {
    db::rollback_if_open(*conn);
    throw;
  }
  // A send with an unknown batch wrote nothing; the others committed.
  for (size_t i = 0; i < group.size(); ++i) {
    try {
      group[i]->result = db::sent(group[i]->item, results[i + 1]);
    } catch (const batch_not_found_error&) {
      group[i]->error = std::current_exception();
    }
  }
}

// -- reads -------------------------------------------------------------------

std::optional<uuid> command_bus::first_existing(const std::string& domain,
                                                const std::vector<uuid>& ids,
                                                db::connection* conn) {
  std::vector<std::string> texts;
  for (auto& id : ids)
    texts.push_back(id.to_string());
  auto sql = "SELECT command_id FROM commandbus.command WHERE domain = $1 AND "
             "command_id = ANY($2::uuid[]) LIMIT 1";
  auto find = [&](db::connection& c) {
    return c.query(sql, domain, db::array_literal(texts));
  };
  auto r = [&] {
    if (conn != nullptr)
      return find(*conn);
    auto lease = pool_.acquire();
    return find(*lease);
  }();
  if (r.rows() == 0)
    return std::nullopt;
  return db::uuid_at(r, 0, 0);
}

std::optional<command_metadata>
command_bus::get_command(const std::string& domain, const uuid& command_id) {
  auto conn = pool_.acquire();
  auto r = conn->query(std::string{"SELECT "} + db::command_columns
                         + " FROM commandbus.command WHERE domain = $1 AND "
                           "command_id = $2::uuid",
                       domain, command_id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  return db::to_command_metadata(r, 0);
}

bool command_bus::command_exists(const std::string& domain,
                                 const uuid& command_id) {
  auto conn = pool_.acquire();
  return conn
           ->query("SELECT 1 FROM commandbus.command WHERE domain = $1 AND "
                   "command_id = $2::uuid",
                   domain, command_id.to_string())
           .rows()
         > 0;
}

std::vector<command_metadata>
command_bus::query_commands(const command_query& q) {
  // The statement's shape depends on which filters are set; every value is
  // a parameter.
  std::string sql = std::string{"SELECT "} + db::command_columns
                    + " FROM commandbus.command WHERE TRUE";
  std::vector<db::param> params;
  auto add = [&](const std::string& cond, db::param value) {
    params.push_back(std::move(value));
    sql += " AND " + cond + " $" + std::to_string(params.size());
  };
  if (q.status)
    add("status =", std::string{to_string(*q.status)});
  if (q.domain)
    add("domain =", *q.domain);
  if (q.command_type)
    add("command_type =", *q.command_type);
  if (q.created_after)
    add("created_at >=", format_timestamp(*q.created_after));
  if (q.created_before)
    add("created_at <=", format_timestamp(*q.created_before));
  if (q.batch_id) {
    params.push_back(q.batch_id->to_string());
    sql += " AND batch_id = $" + std::to_string(params.size()) + "::uuid";
  }
  params.push_back(std::to_string(std::max(0, q.limit)));
  sql += " ORDER BY created_at DESC, command_id LIMIT $"
         + std::to_string(params.size());
  params.push_back(std::to_string(std::max(0, q.offset)));
  sql += " OFFSET $" + std::to_string(params.size());
  auto conn = pool_.acquire();
  return db::to_commands(conn->exec(sql, params));
}

std::vector<audit_event>
command_bus::get_audit_trail(const uuid& command_id,
                             const std::optional<std::string>& domain) {
  auto conn = pool_.acquire();
  std::string sql = std::string{"SELECT "} + db::audit_columns
                    + " FROM commandbus.audit WHERE command_id = $1::uuid";
  std::vector<db::param> params{command_id.to_string()};
  if (domain) {
    sql += " AND domain = $2";
    params.push_back(*domain);
  }
  sql += " ORDER BY ts, audit_id";
  auto r = conn->exec(sql, params);
  std::vector<audit_event> out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(db::to_audit_event(r, i));
  return out;
}

} // namespace cmdbus
