#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "db/connection.hpp"

namespace cmdbus::db {

/// One ordered SQL migration.
struct migration_file {
  std::string_view version;
  std::string_view name;
  std::string_view text;
};

/// Where the `pgmq` schema of a database comes from.
enum class pgmq_source {
  /// The real `pgmq` extension (CREATE EXTENSION pgmq).
  extension,
  /// Our PGMQ-compatible SQL from sql/pgmq (DECISIONS.md D13).
  compat,
  /// A `pgmq` schema installed by someone else without the extension (e.g.
  /// upstream's SQL-only install); used as is.
  external,
};

/// Returns "extension", "compat" or "external".
const char* to_string(pgmq_source x) noexcept;

/// What a `migrate` run did.
struct migrate_report {
  pgmq_source pgmq = pgmq_source::compat;
  /// "component/version__name" of each file applied by this run, in order.
  std::vector<std::string> applied;
};

/// The name of our bookkeeping table.
constexpr std::string_view migrations_table = "commandbus.cmdbus_migrations";

/// Brings the database behind `conn` up to date: installs PGMQ (the real
/// extension when `CREATE EXTENSION pgmq` is possible, else `pgmq_files`),
/// then applies each of `commandbus_files` not applied yet, each in its own
/// transaction together with its bookkeeping row. Serialised across
/// processes by a session advisory lock, so concurrent runs are safe; a run
/// on an up-to-date database changes nothing. Throws `db::error` when a
/// statement fails (the failing file is rolled back) and when an applied
/// file's checksum differs from the bundled one.
migrate_report migrate(connection& conn,
                       const std::vector<migration_file>& pgmq_files,
                       const std::vector<migration_file>& commandbus_files);

/// Returns the checksum recorded for a migration text (FNV-1a 64, hex).
std::string migration_checksum(std::string_view text);

} // namespace cmdbus::db
