// The command bus's reads of delayed commands that are not due yet (see
// docs/scheduling.md, "Delayed commands"). Such a command is PENDING and its
// message, never read, is invisible until its not-before time (read_ct = 0,
// vt > now()); a message read before and invisible again is held by a
// worker or waits for a retry's backoff.

#include "cmdbus/db/command_bus.hpp"

#include <algorithm>

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/db/rows.hpp"

namespace cmdbus {

namespace {

// The command columns qualified with `c.`.
std::string qualified_command_columns() {
  std::string out = "c.";
  for (const char* p = db::command_columns; *p != '\0'; ++p) {
    out += *p;
    if (*p == ' ')
      out += "c.";
  }
  return out;
}

} // namespace

std::vector<scheduled_command>
command_bus::query_scheduled(const command_query& q) {
  if (!q.domain)
    throw command_bus_error("query_scheduled needs a domain");
  auto queue = db::command_queue(*q.domain);
  std::vector<scheduled_command> out;
  if (q.status && *q.status != command_status::pending)
    return out;
  auto conn = pool_.acquire();
  if (!db::queue_exists(*conn, queue))
    return out;
  // Both sides are the backlog, never the history: the queue table, and
  // the PENDING rows (found through the indexes that lead with status).
  // A command row names its current message by msg_id.
  std::string sql = "SELECT " + qualified_command_columns()
                    + ", q.vt FROM pgmq." + db::queue_table(queue)
                    + " q JOIN commandbus.command c ON c.msg_id = q.msg_id "
                      "WHERE c.domain = $1 AND c.status = 'PENDING' AND "
                      "q.read_ct = 0 AND q.vt > now()";
  std::vector<db::param> params{*q.domain};
  auto add = [&](const std::string& cond, db::param value) {
    params.push_back(std::move(value));
    sql += " AND " + cond + " $" + std::to_string(params.size());
  };
  if (q.command_type)
    add("c.command_type =", *q.command_type);
  if (q.created_after)
    add("c.created_at >=", format_timestamp(*q.created_after));
  if (q.created_before)
    add("c.created_at <=", format_timestamp(*q.created_before));
  if (q.batch_id) {
    params.push_back(q.batch_id->to_string());
    sql += " AND c.batch_id = $" + std::to_string(params.size()) + "::uuid";
  }
  params.push_back(std::to_string(std::max(0, q.limit)));
  sql += " ORDER BY q.vt, c.command_id LIMIT $" + std::to_string(params.size());
  params.push_back(std::to_string(std::max(0, q.offset)));
  sql += " OFFSET $" + std::to_string(params.size());
  auto r = conn->exec(sql, params);
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i)
    out.push_back({db::to_command_metadata(r, i), db::time_at(r, i, 15)});
  return out;
}

std::optional<timestamp>
command_bus::scheduled_due_at(const std::string& domain,
                              const uuid& command_id) {
  auto queue = db::command_queue(domain);
  auto conn = pool_.acquire();
  if (!db::queue_exists(*conn, queue))
    return std::nullopt;
  auto r = conn->query("SELECT q.vt FROM commandbus.command c JOIN pgmq."
                         + db::queue_table(queue)
                         + " q ON q.msg_id = c.msg_id WHERE c.domain = $1 AND "
                           "c.command_id = $2::uuid AND c.status = 'PENDING' "
                           "AND q.read_ct = 0 AND q.vt > now()",
                       domain, command_id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  return db::time_at(r, 0, 0);
}

} // namespace cmdbus
