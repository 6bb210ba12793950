#pragma once

// The tool's connections: one-shot pools from a command's --dsn, and a note
// for a listing that came out empty because its domain does not exist.

#include <cstddef>
#include <string>

#include "cmdbus/db/pool.hpp"

namespace cmdbus::cli {

class args;

/// The connection pooler in front of the database: $CMDBUS_POOLER (none,
/// session or transaction), else none. Throws usage_error for another value.
db::pooler_mode pooler_of_environment();

/// Pool settings of a one-shot command: the DSN from `a`, up to `max_size`
/// connections, the pooler from the environment (pooler_of_environment), no
/// reconnect backoff log (the one failure is the command's error).
db::pool_options pool_options_for(const args& a, size_t max_size = 2);

/// For a listing that came out empty: says on stderr when DOMAIN has no
/// command queue, since a mistyped domain otherwise looks like a quiet one.
void note_if_unknown_domain(db::pool& pool, const std::string& domain);

} // namespace cmdbus::cli
