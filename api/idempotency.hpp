#pragma once

// What the command API does with a command id that exists already: the
// same request again is a repeat (answered 200, nothing sent), anything
// else is a conflict (409).
//
// A command the API sent with the client's id has a fingerprint of what
// its request decided (commandbus.cmdbus_api_request, migration V017),
// written in the transaction of the send: a repeat is compared with it,
// whatever the command's state. A command sent another way (the library,
// the CLI, the reference library) has none: a repeat of its id is compared
// with the command itself (same_request).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"

namespace cmdbus::api {

/// A command id and what its request decided (send_body::decided).
using decided_request = std::pair<uuid, std::string>;

/// The statement that records the fingerprints of `requests` of `domain`,
/// to run in the transaction that sends them. A row left by a command that
/// is gone (removed by hand or by another tool) is replaced: the send just
/// created the command, so no other request holds the id.
db::connection::statement
record_requests(const std::string& domain,
                const std::vector<decided_request>& requests);

/// Whether the fingerprint recorded for `request` of `domain` is that of
/// `request`'s own; nothing when none is recorded (a command not sent by
/// the API with the client's id).
std::optional<bool> same_fingerprint(db::connection& conn,
                                     const std::string& domain,
                                     const decided_request& request);

/// Sends `req` (as command_bus::send) with the fingerprint of `decided`
/// (what the request decided) in the same transaction, one round trip.
/// Throws duplicate_command_error when the id exists (nothing is written).
send_result send_recorded(db::pool& pool, command_bus& bus,
                          const send_request& req, const std::string& decided);

/// Creates the batch (as command_bus::create_batch) with the fingerprints
/// of `decided` (one per command; empty: not recorded) in the same
/// transaction.
create_batch_result
create_batch_recorded(db::pool& pool, command_bus& bus,
                      const std::string& domain,
                      const std::vector<batch_command>& commands,
                      const std::vector<std::string>& decided,
                      const create_batch_options& options);

/// What a request whose command id exists is.
enum class repeat_kind {
  /// The request that sent the command, again.
  same,
  /// Another request with that id.
  different,
  /// The command is gone again (removed meanwhile): send it anew.
  gone
};

struct repeat_check {
  repeat_kind kind = repeat_kind::different;
  /// The command, for `same`.
  std::optional<command_metadata> command;
};

/// Compares `req`, whose command id exists, with the request that sent
/// it: by fingerprint when one is recorded, else with the command itself
/// (same_request).
repeat_check check_repeat(db::pool& pool, command_bus& bus,
                          const send_request& req, const std::string& decided);

/// The existing command `req.command_id` of `req.domain` when it is what
/// `req` would send: the same type, reply_to, max_attempts (unset: the
/// bus's default), correlation_id (when `req` gives one), and, while its
/// message is kept (in the queue or its archive; a completed command's is
/// deleted), the same data (as PostgreSQL's jsonb compares) and priority.
/// Nothing when it differs or does not exist.
std::optional<command_metadata>
same_request(db::connection& conn, command_bus& bus, const send_request& req,
             int default_max_attempts = 3);

/// The result of the reply to `command_id` while the reply is in `queue`
/// (not yet read by its consumer); nothing when it is not there, the queue
/// does not exist, or its name is not one PGMQ takes.
std::optional<json> reply_result(db::connection& conn, const std::string& queue,
                                 const uuid& command_id);

} // namespace cmdbus::api
