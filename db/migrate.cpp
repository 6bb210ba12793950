#include "cmdbus/db/migrate.hpp"

#include <cstdint>
#include <map>
#include <utility>

#include "cmdbus/db/rows.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::db {

namespace {

constexpr const char* pgmq_component = "pgmq";
constexpr const char* commandbus_component = "commandbus";

using applied_map = std::map<std::pair<std::string, std::string>, std::string>;

// -- superseded checksums -----------------------------------------------------

/// A checksum that an applied migration may have recorded for an earlier text.
struct superseded {
  std::string_view component;
  std::string_view version;
  std::string_view checksum;
};

/// The checksums of earlier texts of applied migrations whose edits since
/// changed only comments (so the objects they create are the same). A
/// database migrated with an earlier text records the earlier checksum;
/// without this list every such database would be refused by the next
/// `migrate`. Add a row here only for a comment-only edit, with the
/// checksum of the text before the edit (computed from the file as it was
/// committed, e.g. `git show <commit>:sql/...`); any other change to an
/// applied file must go into a new file instead.
constexpr superseded superseded_checksums[] = {
  // Comments that cited documents outside the repository were rewritten
  // (issue 11).
  {"commandbus", "V001", "9554d69e539a0bc9"},
  {"commandbus", "V002", "59af012de1418ac6"},
  {"commandbus", "V003", "7b1b8de246e50bfb"},
  {"commandbus", "V004", "1e808726c07f6c3e"},
  {"commandbus", "V005", "e584a2fb06d65ed0"},
  {"pgmq", "V001", "d5c18f46a42963ac"},
};

class advisory_lock {
public:
  explicit advisory_lock(connection& conn) : conn_(conn) {
    conn_.query("SELECT pg_advisory_lock($1::bigint)", migrate_lock_key);
  }
  ~advisory_lock() {
    if (!conn_.is_open())
      return;
    try {
      conn_.query("SELECT pg_advisory_unlock($1::bigint)", migrate_lock_key);
    } catch (const std::exception& e) {
      log::warn("releasing the migrate lock failed: {}",
                log::one_line(e.what()));
    }
  }

private:
  connection& conn_;
};

void ensure_bookkeeping(connection& conn) {
  conn.exec("CREATE SCHEMA IF NOT EXISTS commandbus;"
            "CREATE TABLE IF NOT EXISTS commandbus.cmdbus_migrations ("
            " component TEXT NOT NULL,"
            " version TEXT NOT NULL,"
            " name TEXT NOT NULL,"
            " checksum TEXT NOT NULL,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),"
            " PRIMARY KEY (component, version))");
}

applied_map load_applied(connection& conn) {
  applied_map out;
  auto res = conn.exec(
    "SELECT component, version, checksum FROM commandbus.cmdbus_migrations");
  for (int i = 0; i < res.rows(); ++i)
    out.emplace(std::make_pair(std::string{res.text(i, 0)},
                               std::string{res.text(i, 1)}),
                std::string{res.text(i, 2)});
  return out;
}

bool has_component(const applied_map& applied, const std::string& component) {
  for (auto& [key, sum] : applied)
    if (key.first == component)
      return true;
  return false;
}

// Applies the files of `component` that are not recorded yet; verifies the
// checksums of those that are.
void apply_pending(connection& conn, const char* component,
                   const std::vector<migration_file>& files,
                   const applied_map& applied, migrate_report& report) {
  for (auto& f : files) {
    std::string version{f.version};
    auto sum = migration_checksum(f.text);
    auto i = applied.find({component, version});
    if (i != applied.end()) {
      if (i->second != sum
          && !superseded_checksum(component, version, i->second))
        throw error{errc::other, "",
                    std::string{"migration "} + component + "/" + version + "__"
                      + std::string{f.name}
                      + " was changed after it was applied (checksum "
                      + i->second + " in the database, " + sum
                      + " in this build); refusing to continue"};
      continue;
    }
    log::info("applying migration {}/{}__{}", component, version, f.name);
    transaction tx{conn};
    try {
      conn.exec(f.text);
    } catch (const error& e) {
      throw error{e.code(), e.sqlstate(),
                  std::string{"migration "} + component + "/" + version + "__"
                    + std::string{f.name} + " failed: " + e.what()};
    }
    conn.query("INSERT INTO commandbus.cmdbus_migrations"
               " (component, version, name, checksum) VALUES ($1, $2, $3, $4)",
               component, version, std::string{f.name}, sum);
    tx.commit();
    report.applied.push_back(std::string{component} + "/" + version + "__"
                             + std::string{f.name});
  }
}

bool pgmq_extension_installed(connection& conn) {
  return conn.exec("SELECT 1 FROM pg_extension WHERE extname = 'pgmq'").rows()
         > 0;
}

bool pgmq_extension_available(connection& conn) {
  return conn.exec("SELECT 1 FROM pg_available_extensions WHERE name = 'pgmq'")
           .rows()
         > 0;
}

bool pgmq_schema_exists(connection& conn) {
  return conn.exec("SELECT 1 FROM pg_namespace WHERE nspname = 'pgmq'").rows()
         > 0;
}

bool try_create_extension(connection& conn) {
  try {
    transaction tx{conn};
    conn.exec("CREATE EXTENSION pgmq");
    tx.commit();
    return true;
  } catch (const error& e) {
    if (e.code() == errc::connection)
      throw;
    log::warn("the pgmq extension is available but CREATE EXTENSION "
              "failed ({}); installing the PGMQ-compatible SQL instead",
              log::one_line(e.what()));
    return false;
  }
}

pgmq_source install_pgmq(connection& conn,
                         const std::vector<migration_file>& pgmq_files,
                         const applied_map& applied, migrate_report& report) {
  if (pgmq_extension_installed(conn))
    return pgmq_source::extension;
  if (has_component(applied, pgmq_component)) {
    apply_pending(conn, pgmq_component, pgmq_files, applied, report);
    return pgmq_source::compat;
  }
  if (pgmq_schema_exists(conn)) {
    if (conn.exec("SELECT to_regprocedure('pgmq.send(text,jsonb,integer)')")
          .is_null(0, 0))
      throw error{errc::other, "",
                  "schema pgmq exists but is neither the pgmq extension nor "
                  "a PGMQ install (pgmq.send(text, jsonb, integer) is "
                  "missing); refusing to install over it"};
    log::info("using the existing pgmq schema (installed without the "
              "extension)");
    return pgmq_source::external;
  }
  if (pgmq_extension_available(conn) && try_create_extension(conn)) {
    report.applied.push_back("pgmq/extension");
    return pgmq_source::extension;
  }
  apply_pending(conn, pgmq_component, pgmq_files, applied, report);
  return pgmq_source::compat;
}

} // namespace

const char* to_string(pgmq_source x) noexcept {
  switch (x) {
    case pgmq_source::extension: return "extension";
    case pgmq_source::compat: return "compat";
    case pgmq_source::external: return "external";
  }
  return "compat";
}

std::string migration_checksum(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = hex[h & 0xf];
    h >>= 4;
  }
  return out;
}

bool superseded_checksum(std::string_view component, std::string_view version,
                         std::string_view checksum) {
  for (auto& x : superseded_checksums)
    if (x.component == component && x.version == version
        && x.checksum == checksum)
      return true;
  return false;
}

migrate_report migrate(connection& conn,
                       const std::vector<migration_file>& pgmq_files,
                       const std::vector<migration_file>& commandbus_files) {
  // The lock that keeps two runs apart is a session's: behind a
  // transaction pooler its unlock could reach another server session and
  // leave it held for good.
  if (conn.pooler() == pooler_mode::transaction)
    throw invalid_argument(
      "migrations hold a session-level lock and cannot run through a "
      "transaction pooler: run `cmdbus migrate` against the server itself "
      "(or through a session pooler)");
  migrate_report report;
  advisory_lock lock{conn};
  ensure_bookkeeping(conn);
  auto applied = load_applied(conn);
  report.pgmq = install_pgmq(conn, pgmq_files, applied, report);
  apply_pending(conn, commandbus_component, commandbus_files, applied, report);
  return report;
}

const char* to_string(checksum_state x) noexcept {
  switch (x) {
    case checksum_state::match: return "match";
    case checksum_state::superseded: return "superseded";
    case checksum_state::changed: return "changed";
    case checksum_state::not_bundled: return "not_bundled";
  }
  return "changed";
}

std::string migration_state::full_name() const {
  return component + "/" + version + "__" + name;
}

bool migration_status_report::tampered() const noexcept {
  for (auto& m : migrations)
    if (m.checksum == checksum_state::changed)
      return true;
  return false;
}

size_t migration_status_report::pending() const noexcept {
  size_t n = 0;
  for (auto& m : migrations)
    n += m.applied ? 0 : 1;
  return n;
}

migration_status_report
migration_status(connection& conn,
                 const std::vector<migration_file>& pgmq_files,
                 const std::vector<migration_file>& commandbus_files) {
  migration_status_report report;
  report.pgmq_extension_available = pgmq_extension_available(conn);
  // Applied rows, without creating the bookkeeping table (read only).
  std::vector<migration_state> applied;
  if (!conn.exec("SELECT to_regclass('commandbus.cmdbus_migrations')")
         .is_null(0, 0)) {
    auto r = conn.exec("SELECT component, version, name, checksum, applied_at"
                       " FROM commandbus.cmdbus_migrations"
                       " ORDER BY component DESC, version");
    for (int i = 0; i < r.rows(); ++i) {
      migration_state m;
      m.component = r.text(i, 0);
      m.version = r.text(i, 1);
      m.name = r.text(i, 2);
      m.applied = true;
      m.applied_at = time_at(r, i, 4);
      m.recorded_checksum = std::string{r.text(i, 3)};
      applied.push_back(std::move(m));
    }
  }
  auto bundled =
    [&](const std::string& component) -> const std::vector<migration_file>& {
    return component == pgmq_component ? pgmq_files : commandbus_files;
  };
  for (auto& m : applied) {
    m.checksum = checksum_state::not_bundled;
    for (auto& f : bundled(m.component)) {
      if (f.version != m.version)
        continue;
      m.bundled_checksum = migration_checksum(f.text);
      if (*m.bundled_checksum == *m.recorded_checksum)
        m.checksum = checksum_state::match;
      else if (superseded_checksum(m.component, m.version,
                                   *m.recorded_checksum))
        m.checksum = checksum_state::superseded;
      else
        m.checksum = checksum_state::changed;
    }
  }
  bool pgmq_recorded = false;
  for (auto& m : applied)
    pgmq_recorded = pgmq_recorded || m.component == pgmq_component;
  // Which pgmq files `migrate` would apply (see install_pgmq).
  bool pgmq_files_pending = false;
  if (pgmq_extension_installed(conn)) {
    report.pgmq = pgmq_source::extension;
  } else if (pgmq_recorded) {
    report.pgmq = pgmq_source::compat;
    pgmq_files_pending = true;
  } else if (pgmq_schema_exists(conn)) {
    report.pgmq = pgmq_source::external;
  } else {
    pgmq_files_pending = !report.pgmq_extension_available;
  }
  report.migrations = applied;
  auto add_pending = [&](const char* component,
                         const std::vector<migration_file>& files) {
    for (auto& f : files) {
      bool done = false;
      for (auto& m : applied)
        done = done || (m.component == component && m.version == f.version);
      if (done)
        continue;
      migration_state m;
      m.component = component;
      m.version = std::string{f.version};
      m.name = std::string{f.name};
      m.bundled_checksum = migration_checksum(f.text);
      report.migrations.push_back(std::move(m));
    }
  };
  if (pgmq_files_pending)
    add_pending(pgmq_component, pgmq_files);
  add_pending(commandbus_component, commandbus_files);
  return report;
}

} // namespace cmdbus::db
