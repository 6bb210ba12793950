#pragma once

// One chunk of a bulk send (`send_batch`, `create_batch`) written in one
// transaction: with one cmdbus_send_commands statement per domain for small
// chunks, with COPY for large ones.

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/prepared_command.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::db {

/// Looks for the first of `ids` that exists in `domain`; on `conn`, or on a
/// connection of its own when `conn` is null.
using find_existing_fn = std::function<std::optional<uuid>(
  const std::string& domain, const std::vector<uuid>& ids, connection* conn)>;

/// Sends `items` as one chunk on `conn` and returns their results in input
/// order. With `own_transaction` (or when no transaction is open on `conn`)
/// the chunk is its own transaction, rolled back on failure; else it runs in
/// the caller's. Chunks of at least `copy_threshold` commands are written
/// with COPY. Throws `duplicate_command_error` naming a command that exists
/// (found with `find_existing`), `batch_not_found_error` naming the domain,
/// `db::error` otherwise.
std::vector<send_result> send_chunk(const std::vector<prepared_command>& items,
                                    connection& conn, bool own_transaction,
                                    size_t copy_threshold,
                                    const find_existing_fn& find_existing);

} // namespace cmdbus::db
