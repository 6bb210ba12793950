#pragma once

// The command queue a program is about to use: it must exist, unless the
// program was asked to create it (`--create`), so that a mistyped domain
// fails instead of getting a queue that nobody reads. Shared by the tool
// (`send`, `process start`) and worker programs. Private: not installed.

#include <string>

#include "cmdbus/db/pool.hpp"

namespace cmdbus::cli {

/// Throws not_found, naming `--create`, unless the PGMQ queue exists; with
/// `create`, creates it instead.
void require_queue(db::pool& pool, const std::string& queue, bool create);

} // namespace cmdbus::cli
