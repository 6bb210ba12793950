#pragma once

#include <vector>

#include "cmdbus/db/migrate.hpp"

namespace cmdbus::sql {

/// Returns our PGMQ-compatible install (sql/pgmq/V*.sql) in version order.
/// Applied only when the real pgmq extension is not available (see
/// docs/design.md, "PGMQ: extension or compatible SQL").
const std::vector<db::migration_file>& pgmq_files();

/// Returns the commandbus schema migrations (sql/commandbus/V*.sql) in
/// version order.
const std::vector<db::migration_file>& commandbus_files();

} // namespace cmdbus::sql
