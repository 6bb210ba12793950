#pragma once

// State checks of the database tests: the command, audit, queue and reply
// state read with SQL on a connection of the test's own, and JSON texts
// taken apart by the server.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::test {

using opt_str = std::optional<std::string>;
using strings = std::vector<std::string>;

// -- queries -----------------------------------------------------------------

/// Returns the first column of the first row as text (nullopt for NULL or
/// no row).
template <class... Ts>
opt_str scalar(db::connection& c, const std::string& sql, const Ts&... xs) {
  auto r = c.query(sql, xs...);
  if (r.rows() == 0 || r.is_null(0, 0))
    return std::nullopt;
  return std::string{r.text(0, 0)};
}

// -- commands ----------------------------------------------------------------

/// Returns the command queue of `domain` (`{domain}__commands`).
std::string queue_of(const std::string& domain);

/// Returns a column of the command row as text.
opt_str column(db::connection& c, const std::string& domain, const uuid& id,
               const std::string& col);

/// Returns the status of a command (nullopt when it does not exist).
opt_str status_of(db::connection& c, const std::string& domain,
                  const uuid& id);

/// Returns the attempts of a command (-1 when it does not exist).
int attempts_of(db::connection& c, const std::string& domain, const uuid& id);

bool has_status(db::connection& c, const std::string& domain, const uuid& id,
                const std::string& status);

bool all_have_status(db::connection& c, const std::string& domain,
                     const std::vector<uuid>& ids, const std::string& status);

/// Returns how many commands of `domain` have `status`.
int64_t count_status(db::connection& c, const std::string& domain,
                     const std::string& status);

/// Returns how many commands `domain` has.
int64_t command_rows(db::connection& c, const std::string& domain);

// -- audit -------------------------------------------------------------------

/// The audit event types of a command, in their order (ts, audit_id).
strings events(db::connection& c, const std::string& domain, const uuid& id);

/// `details_json #>> path` of the `nth` audit event of type `event`.
opt_str audit_detail(db::connection& c, const std::string& domain,
                     const uuid& id, const std::string& event,
                     const std::string& path, int nth = 0);

int64_t count_events(db::connection& c, const std::string& domain,
                     const uuid& id, const std::string& event);

// -- queues ------------------------------------------------------------------

/// Rows of pgmq.q_<queue>; the queue must exist.
int64_t queue_rows(db::connection& c, const std::string& queue);

/// Rows of pgmq.a_<queue>; the queue must exist.
int64_t archive_rows(db::connection& c, const std::string& queue);

/// Messages in `queue`, 0 when there is no such queue.
int64_t queue_length(db::connection& c, const std::string& queue);

/// Whether the message `msg_id` is in the archive of `queue`.
bool archived(db::connection& c, const std::string& queue, int64_t msg_id);

/// The messages of a (reply) queue as JSON text, oldest first.
strings messages(db::connection& c, const std::string& queue);

/// Whether the message `msg_id` of `queue` has vt > now() + `interval`.
bool vt_beyond(db::connection& c, const std::string& queue, int64_t msg_id,
               const std::string& interval);

// -- JSON --------------------------------------------------------------------

/// `text::jsonb #>> path` ("{a,b}"), nullopt for a missing key / JSON null.
opt_str jget(db::connection& c, const std::string& text,
             const std::string& path);

/// Whether `text::jsonb #> path` equals `expected::jsonb`.
bool jeq(db::connection& c, const std::string& text, const std::string& path,
         const std::string& expected);

/// Whether the JSON object `text` has the top-level key `key`.
bool jhas(db::connection& c, const std::string& text, const std::string& key);

/// Parses JSON text (a handler's result, a failure's details).
inline json obj(const std::string& text) {
  return json::parse(text);
}

} // namespace cmdbus::test
