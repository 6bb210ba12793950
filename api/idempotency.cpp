#include "api/idempotency.hpp"

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/prepared_command.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/send_statement.hpp"
#include "cmdbus/model/errors.hpp"

namespace cmdbus::api {

namespace {

/// The archive table of `queue` (validated): a_{queue}.
std::string archive_table(const std::string& queue) {
  auto table = db::queue_table(queue);
  table[0] = 'a';
  return table;
}

} // namespace

db::connection::statement
record_requests(const std::string& domain,
                const std::vector<decided_request>& requests) {
  std::vector<std::string> ids;
  std::vector<std::string> decided;
  for (auto& [id, d] : requests) {
    ids.push_back(id.to_string());
    decided.push_back(d);
  }
  return {"INSERT INTO commandbus.cmdbus_api_request (domain, command_id, "
          "fingerprint) SELECT $1, r.id, "
          "commandbus.cmdbus_api_fingerprint(r.decided) FROM "
          "unnest($2::uuid[], $3::jsonb[]) AS r(id, decided) "
          "ON CONFLICT (domain, command_id) DO UPDATE SET fingerprint = "
          "EXCLUDED.fingerprint, created_at = now()",
          {domain, db::array_literal(ids), db::array_literal(decided)},
          "cmdbus_api_record"};
}

std::optional<bool> same_fingerprint(db::connection& conn,
                                     const std::string& domain,
                                     const decided_request& request) {
  auto r = conn.query(
    "SELECT fingerprint = commandbus.cmdbus_api_fingerprint($3::jsonb) FROM "
    "commandbus.cmdbus_api_request WHERE domain = $1 AND command_id = $2::uuid",
    domain, request.first.to_string(), request.second);
  if (r.rows() == 0)
    return std::nullopt;
  return r.text(0, 0) == "t";
}

send_result send_recorded(db::pool& pool, command_bus& bus,
                          const send_request& req,
                          const std::string& decided) {
  auto p = db::prepare(req, command_bus_options{}.default_max_attempts);
  // Queues first: creating one takes a pooled connection of its own.
  bus.ensure_queue(p.queue);
  if (p.reply_to)
    bus.ensure_queue(*p.reply_to);
  auto conn = pool.acquire();
  // BEGIN, the send, the fingerprint and COMMIT in one round trip. A
  // concurrent send of the same id waits for ours on the command's unique
  // index and fails as a duplicate once ours commits, fingerprint and all.
  try {
    auto results = conn->pipeline({{"BEGIN", {}},
                                   db::send_statement(p),
                                   record_requests(req.domain,
                                                   {{req.command_id, decided}}),
                                   {"COMMIT", {}}});
    return db::sent(p, results[1]);
  } catch (const db::error& e) {
    db::rollback_if_open(*conn);
    if (db::is_duplicate_command(e))
      throw duplicate_command_error(req.domain, req.command_id);
    throw;
  }
}

create_batch_result
create_batch_recorded(db::pool& pool, command_bus& bus,
                      const std::string& domain,
                      const std::vector<batch_command>& commands,
                      const std::vector<std::string>& decided,
                      const create_batch_options& options) {
  std::vector<decided_request> recorded;
  for (size_t i = 0; i < commands.size() && i < decided.size(); ++i)
    if (!decided[i].empty())
      recorded.emplace_back(commands[i].command_id, decided[i]);
  for (auto& c : commands)
    if (c.reply_to) {
      db::validate_queue_name(*c.reply_to);
      bus.ensure_queue(*c.reply_to);
    }
  bus.ensure_queue(db::command_queue(domain));
  return db::in_transaction(pool, [&](db::connection& conn) {
    auto made = bus.create_batch(domain, commands, options, conn);
    if (!recorded.empty()) {
      auto st = record_requests(domain, recorded);
      conn.exec_prepared(st.name, st.sql, st.params);
    }
    return made;
  });
}

repeat_check check_repeat(db::pool& pool, command_bus& bus,
                          const send_request& req,
                          const std::string& decided) {
  std::optional<bool> same;
  {
    auto conn = pool.acquire();
    same = same_fingerprint(*conn, req.domain, {req.command_id, decided});
    if (!same) {
      auto m = same_request(*conn, bus, req);
      if (m)
        return {repeat_kind::same, std::move(m)};
      // Removed since the send found it (same_request found nothing)?
      return {bus.command_exists(req.domain, req.command_id)
                ? repeat_kind::different
                : repeat_kind::gone,
              std::nullopt};
    }
  }
  if (!*same)
    return {repeat_kind::different, std::nullopt};
  auto m = bus.get_command(req.domain, req.command_id);
  if (!m)
    return {repeat_kind::gone, std::nullopt};
  return {repeat_kind::same, std::move(m)};
}

std::optional<command_metadata>
same_request(db::connection& conn, command_bus& bus, const send_request& req,
             int default_max_attempts) {
  auto m = bus.get_command(req.domain, req.command_id);
  if (!m)
    return std::nullopt;
  auto max_attempts = req.max_attempts.value_or(0) > 0 ? *req.max_attempts
                                                       : default_max_attempts;
  if (m->command_type != req.command_type || m->reply_to != req.reply_to
      || m->max_attempts != max_attempts || m->batch_id.has_value()
      || (req.correlation_id && m->correlation_id != req.correlation_id))
    return std::nullopt;
  if (!m->msg_id)
    return m;
  auto queue = db::command_queue(req.domain);
  auto priority = req.priority ? std::to_string(*req.priority) : "";
  // Names validated by queue_table.
  std::string same = "SELECT message->'data' = $2::jsonb AND "
                     "coalesce(message->>'priority', '') = $3 FROM pgmq.";
  auto r = conn.query(same + db::queue_table(queue) + " WHERE msg_id = $1 "
                        + "UNION ALL " + same + archive_table(queue)
                        + " WHERE msg_id = $1 LIMIT 1",
                      *m->msg_id, req.data.text(), priority);
  if (r.rows() == 0 || r.text(0, 0) == "t")
    return m;
  return std::nullopt;
}

std::optional<json> reply_result(db::connection& conn, const std::string& queue,
                                 const uuid& command_id) {
  // A reply queue named by another client may not be one we can read.
  try {
    db::validate_queue_name(queue);
  } catch (const db::invalid_argument&) {
    return std::nullopt;
  }
  try {
    auto r = conn.query("SELECT message->'result' FROM pgmq."
                          + db::queue_table(queue)
                          + " WHERE message->>'command_id' = $1 ORDER BY "
                            "msg_id DESC LIMIT 1",
                        command_id.to_string());
    if (r.rows() == 0 || r.is_null(0, 0))
      return std::nullopt;
    return json::parse(r.text(0, 0));
  } catch (const db::error& e) {
    // The consumer may have dropped its queue: no result to show.
    if (e.code() == db::errc::undefined_table)
      return std::nullopt;
    throw;
  }
}

} // namespace cmdbus::api
