#include "api/idempotency.hpp"

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::api {

namespace {

/// The archive table of `queue` (validated): a_{queue}.
std::string archive_table(const std::string& queue) {
  auto table = db::queue_table(queue);
  table[0] = 'a';
  return table;
}

} // namespace

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
