// Batches of the command bus: creating one atomically (the batch row and
// all its commands) and reading batches and their commands.

#include <algorithm>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/rows.hpp"
#include "cmdbus/db/send_statement.hpp"
#include "cmdbus/db/transaction.hpp"

namespace cmdbus {

// -- create_batch ------------------------------------------------------------

create_batch_result
command_bus::create_batch(const std::string& domain,
                          const std::vector<batch_command>& commands,
                          const create_batch_options& opts) {
  // Queues first, since creating them takes a pooled connection of its own;
  // but only once every name is known to be valid.
  auto queue = db::command_queue(domain);
  for (auto& c : commands)
    if (c.reply_to)
      db::validate_queue_name(*c.reply_to);
  if (!commands.empty()) {
    ensure_queue(queue);
    for (auto& c : commands)
      if (c.reply_to)
        ensure_queue(*c.reply_to);
  }
  return db::in_transaction(pool_, [&](db::connection& conn) {
    return create_batch(domain, commands, opts, conn);
  });
}

create_batch_result
command_bus::create_batch(const std::string& domain,
                          const std::vector<batch_command>& commands,
                          const create_batch_options& opts,
                          db::connection& conn) {
  if (commands.empty())
    throw command_bus_error("create_batch needs at least one command");
  db::validate_domain(domain);
  db::check_unique(commands.size(), [&](size_t i) {
    return std::make_pair(&domain, commands[i].command_id);
  });
  create_batch_result out;
  out.batch_id = opts.batch_id ? *opts.batch_id : uuid::random();
  std::vector<db::prepared_command> items;
  items.reserve(commands.size());
  for (auto& c : commands) {
    send_request req;
    req.domain = domain;
    req.command_type = c.command_type;
    req.command_id = c.command_id;
    req.data = c.data;
    req.correlation_id = c.correlation_id;
    req.reply_to = c.reply_to;
    req.max_attempts = c.max_attempts;
    req.not_before = c.not_before;
    req.priority = c.priority;
    items.push_back(prepare(req));
    items.back().batch_id = out.batch_id;
  }
  ensure_queues(items);
  try {
    conn.query("INSERT INTO commandbus.batch (domain, batch_id, name, "
               "custom_data, status, total_count, batch_type) VALUES ($1, "
               "$2::uuid, $3, $4::jsonb, 'PENDING', $5::int, 'COMMAND')",
               domain, out.batch_id.to_string(), opts.name,
               opts.custom_data
                 ? std::optional<std::string>{opts.custom_data->text()}
                 : std::nullopt,
               static_cast<int>(commands.size()));
  } catch (const db::error& e) {
    if (e.sqlstate() == db::sqlstate_unique_violation)
      throw invalid_operation_error("batch " + out.batch_id.to_string()
                                    + " already exists in domain " + domain);
    throw;
  }
  out.command_results = send_chunk(items, conn, false);
  out.total_commands = static_cast<int>(commands.size());
  return out;
}

// -- reads -------------------------------------------------------------------

namespace {

// The status filter as a parameter: NULL matches every status.
template <class Status>
db::param status_param(const std::optional<Status>& status) {
  if (!status)
    return std::nullopt;
  return std::string{to_string(*status)};
}

std::optional<batch_metadata> read_batch(db::connection& conn,
                                         const std::string& domain,
                                         const uuid& batch_id) {
  auto r = conn.query(std::string{"SELECT "} + db::batch_columns
                        + " FROM commandbus.batch WHERE domain = $1 AND "
                          "batch_id = $2::uuid",
                      domain, batch_id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  return db::to_batch_metadata(r, 0);
}

} // namespace

std::optional<batch_metadata> command_bus::get_batch(const std::string& domain,
                                                     const uuid& batch_id) {
  auto conn = pool_.acquire();
  return read_batch(*conn, domain, batch_id);
}

std::optional<batch_metadata>
command_bus::refresh_batch(const std::string& domain, const uuid& batch_id) {
  return db::in_transaction(
    pool_, [&](db::connection& conn) -> std::optional<batch_metadata> {
      auto before = conn.query(
        "SELECT status FROM commandbus.batch WHERE domain "
        "= $1 AND batch_id = $2::uuid FOR UPDATE",
        domain, batch_id.to_string());
      if (before.rows() == 0)
        return std::nullopt;
      auto was_finished = before.text(0, 0) == "COMPLETED"
                          || before.text(0, 0) == "COMPLETED_WITH_FAILURES";
      // The function's UPDATE is visible to the next statement only (a
      // statement's snapshot predates the function's writes), hence the
      // separate read.
      conn.query(
        "SELECT 1 FROM commandbus.sp_refresh_batch_stats($1, $2::uuid)", domain,
        batch_id.to_string());
      auto after = read_batch(conn, domain, batch_id);
      // A batch that the repair finished gets its completion callback: the
      // delivery is recorded as the worker records the batches it finishes.
      if (!was_finished && after
          && (after->status == batch_status::completed
              || after->status == batch_status::completed_with_failures))
        conn.query("INSERT INTO commandbus.cmdbus_batch_delivery (domain, "
                   "batch_id) VALUES ($1, $2::uuid) ON CONFLICT DO NOTHING",
                   domain, batch_id.to_string());
      return after;
    });
}

std::vector<batch_metadata>
command_bus::list_batches(const std::string& domain,
                          std::optional<batch_status> status, int limit,
                          int offset) {
  auto conn = pool_.acquire();
  return db::to_batches(conn->query(
    std::string{"SELECT "} + db::batch_columns
      + " FROM commandbus.batch WHERE domain = $1 AND ($2::text IS NULL OR "
        "status = $2) ORDER BY created_at DESC, batch_id LIMIT $3 OFFSET $4",
    domain, status_param(status), std::max(0, limit), std::max(0, offset)));
}

std::vector<command_metadata>
command_bus::list_batch_commands(const std::string& domain,
                                 const uuid& batch_id,
                                 std::optional<command_status> status,
                                 int limit, int offset) {
  auto conn = pool_.acquire();
  return db::to_commands(conn->query(
    std::string{"SELECT "} + db::command_columns
      + " FROM commandbus.command WHERE domain = $1 AND batch_id = $2::uuid "
        "AND ($3::text IS NULL OR status = $3) ORDER BY created_at, "
        "command_id LIMIT $4 OFFSET $5",
    domain, batch_id.to_string(), status_param(status), std::max(0, limit),
    std::max(0, offset)));
}

} // namespace cmdbus
