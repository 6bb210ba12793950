#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/model/types.hpp"

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
  /// Our PGMQ-compatible SQL from sql/pgmq, installed when the extension is
  /// not available (docs/design.md, "PGMQ: extension or compatible SQL").
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

/// The key of the advisory lock that serialises `migrate` runs (and `cmdbus
/// grant` runs with them) on a database: an arbitrary constant ("cmdbus" in
/// ASCII).
inline constexpr const char* migrate_lock_key = "109315985728883";

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

/// Returns whether `checksum` is the checksum of an earlier text of the
/// migration `component`/`version` that differs from today's text only in
/// its comments; `migrate` accepts such a recorded checksum like the current
/// one (see migrate.cpp).
bool superseded_checksum(std::string_view component, std::string_view version,
                         std::string_view checksum);

/// How an applied migration's recorded checksum compares with the bundled
/// file.
enum class checksum_state {
  /// The same text.
  match,
  /// An earlier text that differs only in comments (`superseded_checksum`).
  superseded,
  /// A different text: `migrate` refuses to run on this database.
  changed,
  /// No bundled file has this version (applied by another build).
  not_bundled,
};

/// Returns "match", "superseded", "changed" or "not_bundled".
const char* to_string(checksum_state x) noexcept;

/// One migration as `migration_status` reports it.
struct migration_state {
  /// "pgmq" or "commandbus".
  std::string component;
  std::string version;
  std::string name;
  /// Whether the database records it.
  bool applied = false;
  std::optional<timestamp> applied_at;
  /// The recorded checksum (applied) and the bundled one (bundled).
  std::optional<std::string> recorded_checksum;
  std::optional<std::string> bundled_checksum;
  /// Set for applied migrations only.
  std::optional<checksum_state> checksum;

  /// Returns "component/version__name".
  std::string full_name() const;
};

/// What `migration_status` found.
struct migration_status_report {
  /// Where `pgmq` comes from; unset when the database has no pgmq schema
  /// yet (`migrate` would create the extension when it is available, else
  /// apply the bundled pgmq files).
  std::optional<pgmq_source> pgmq;
  /// Whether the pgmq extension is available on the server.
  bool pgmq_extension_available = false;
  /// Applied migrations first (component, version order), then pending
  /// ones: bundled files not recorded. The bundled pgmq files are pending
  /// only when `migrate` would apply them (no pgmq schema yet and no
  /// extension available, or the compatible install is in use).
  std::vector<migration_state> migrations;

  /// Returns whether any applied migration's checksum is `changed`.
  bool tampered() const noexcept;
  /// Returns the number of pending migrations.
  size_t pending() const noexcept;
};

/// Reports which migrations the database behind `conn` has applied and which
/// of the bundled ones are pending. Only reads (also on a fresh database,
/// where everything is pending): it never creates or changes anything.
migration_status_report
migration_status(connection& conn,
                 const std::vector<migration_file>& pgmq_files,
                 const std::vector<migration_file>& commandbus_files);

} // namespace cmdbus::db
