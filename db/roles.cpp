#include "cmdbus/db/roles.hpp"

#include <algorithm>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/db/transaction.hpp"

namespace cmdbus::db {

namespace {

bool plain_identifier(std::string_view name, size_t max_size) {
  if (name.empty() || name.size() > max_size)
    return false;
  if (!((name[0] >= 'a' && name[0] <= 'z') || name[0] == '_'))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs) {
    if (!out.empty())
      out += ", ";
    out += x;
  }
  return out;
}

// The rights of each group. Tables and sequences of both schemas; what the
// owners create there later gets the same rights (default privileges).
void add_rights(std::vector<std::string>& out, const std::string& database,
                const role_groups& g, const std::vector<std::string>& owners) {
  auto w = quote_identifier(g.worker);
  auto o = quote_identifier(g.operator_role);
  auto r = quote_identifier(g.reader);
  auto writers = w + ", " + o;
  auto all = writers + ", " + r;
  // CONNECT only where the connected role may grant it (the database's
  // owner, a superuser); every role has it unless it was revoked from
  // PUBLIC.
  if (!database.empty())
    out.push_back("GRANT CONNECT ON DATABASE " + quote_identifier(database)
                  + " TO " + all);
  out.push_back("GRANT USAGE ON SCHEMA commandbus, pgmq TO " + all);
  // The reader: SELECT, nothing else.
  out.push_back("GRANT SELECT ON ALL TABLES IN SCHEMA commandbus, pgmq TO "
                + r);
  out.push_back("GRANT SELECT ON ALL SEQUENCES IN SCHEMA commandbus, pgmq TO "
                + r);
  // Worker and operator: rows, never DDL (no TRUNCATE, REFERENCES or
  // TRIGGER either). The migrations' bookkeeping and PGMQ's list of queues
  // stay read-only: only migrate and queue creation (as the owner) write
  // them.
  out.push_back("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
                "commandbus, pgmq TO "
                + writers);
  out.push_back(
    "REVOKE INSERT, UPDATE, DELETE ON commandbus.cmdbus_migrations, "
    "pgmq.meta FROM "
    + writers);
  out.push_back("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA commandbus, "
                "pgmq TO "
                + writers);
  // Queues are created as the owner, through the owner's function: by the
  // operator, and by the worker for the reply queues its commands name
  // (and its own queue with --create); the tables stay the owner's, so
  // neither may drop them. The index of the priority order is built by the
  // worker at its start.
  out.push_back(
    "GRANT EXECUTE ON FUNCTION commandbus.cmdbus_create_queue(text) TO "
    + writers);
  out.push_back("GRANT EXECUTE ON FUNCTION "
                "commandbus.cmdbus_create_partitioned_queue(text, text, text) "
                "TO "
                + o);
  out.push_back("GRANT EXECUTE ON FUNCTION "
                "commandbus.cmdbus_create_priority_index(text) TO "
                + writers);
  // Partitions are created and dropped as the owner, by the housekeeping
  // runner (a worker) and `cmdbus prune` (an operator).
  out.push_back("GRANT EXECUTE ON FUNCTION "
                "commandbus.cmdbus_partition_maintenance(text, interval) TO "
                + writers);
  for (auto& owner : owners) {
    auto prefix = "ALTER DEFAULT PRIVILEGES FOR ROLE " + quote_identifier(owner)
                  + " IN SCHEMA commandbus, pgmq GRANT ";
    out.push_back(prefix + "SELECT ON TABLES TO " + r);
    out.push_back(prefix + "SELECT ON SEQUENCES TO " + r);
    out.push_back(prefix + "SELECT, INSERT, UPDATE, DELETE ON TABLES TO "
                  + writers);
    out.push_back(prefix + "USAGE, SELECT ON SEQUENCES TO " + writers);
  }
}

// Throws unless the connected role may run the plan.
void check_rights(connection& conn, const grant_plan& plan, bool members) {
  auto res = conn.exec("SELECT current_user, r.rolsuper, r.rolcreaterole"
                       " FROM pg_roles r WHERE r.rolname = current_user");
  std::string me{res.text(0, 0)};
  bool super = res.text(0, 1) == "t";
  bool create_role = res.text(0, 2) == "t";
  for (auto& owner : plan.owners) {
    auto member = conn.query("SELECT pg_has_role(current_user, $1, 'MEMBER')",
                             owner);
    if (member.text(0, 0) != "t")
      throw error{errc::other, "42501",
                  "role " + me + " may not grant the rights on the objects of "
                    + owner
                    + ": run `cmdbus grant` as the role that ran `cmdbus "
                      "migrate` ("
                    + owner + ") or as a superuser"};
  }
  if (!plan.created_groups.empty() && !super && !create_role)
    throw error{errc::other, "42501",
                "role " + me + " may not create the group role(s) "
                  + join(plan.created_groups)
                  + ": run `cmdbus grant` as a role with CREATEROLE (or a "
                    "superuser), or have them created first (CREATE ROLE "
                    "name NOLOGIN)"};
  if (members && !super && !create_role)
    throw error{errc::other, "42501",
                "role " + me
                  + " may not grant membership in the groups: run `cmdbus "
                    "grant` with --worker, --operator or --reader as a role "
                    "with CREATEROLE (or a superuser)"};
}

} // namespace

role_groups role_groups_for(std::string_view prefix) {
  if (!plain_identifier(prefix, 54))
    throw invalid_argument{
      "invalid group prefix '" + std::string{prefix}
      + "': 1 to 54 lower-case letters, digits or underscores, starting with "
        "a letter or an underscore"};
  std::string p{prefix};
  return {p + "_worker", p + "_operator", p + "_reader"};
}

void validate_role_name(std::string_view name) {
  if (name.empty() || name.size() > 63)
    throw invalid_argument{"invalid role name '" + std::string{name}
                           + "': 1 to 63 bytes"};
  if (name.find('\0') != std::string_view::npos)
    throw invalid_argument{"invalid role name: it holds a NUL byte"};
  std::string lower;
  for (char c : name)
    lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "public" || lower.rfind("pg_", 0) == 0)
    throw invalid_argument{"invalid role name '" + std::string{name}
                           + "': PUBLIC and names starting with pg_ are "
                             "reserved"};
}

std::string quote_identifier(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"')
      out += '"';
    out += c;
  }
  return out + "\"";
}

grant_plan plan_grants(connection& conn, const grant_request& req) {
  grant_plan plan;
  plan.groups = role_groups_for(req.prefix);
  const std::vector<std::string> groups{
    plan.groups.worker, plan.groups.operator_role, plan.groups.reader};
  for (auto* list : {&req.workers, &req.operators, &req.readers})
    for (auto& name : *list) {
      validate_role_name(name);
      if (std::find(groups.begin(), groups.end(), name) != groups.end())
        throw invalid_argument{"role " + name
                               + " is one of the groups itself: name the "
                                 "login roles that should join it"};
    }
  auto schema = conn.exec(
    "SELECT (SELECT rolname FROM pg_roles WHERE oid = n.nspowner),"
    " (SELECT rolname FROM pg_roles WHERE oid = p.proowner),"
    " current_database(),"
    " has_database_privilege(current_database(),"
    "   'CONNECT WITH GRANT OPTION')"
    " FROM pg_namespace n"
    " LEFT JOIN pg_proc p"
    "   ON p.oid = to_regprocedure('commandbus.cmdbus_create_queue(text)')"
    " WHERE n.nspname = 'commandbus'");
  if (schema.rows() == 0)
    throw error{errc::other, "",
                "the database has no cmdbus schema (it was never migrated): "
                "run `cmdbus migrate` first"};
  if (schema.is_null(0, 1))
    throw error{errc::other, "",
                "the database lacks the queue-creating function of migration "
                "V014: run `cmdbus migrate` first"};
  for (int c = 0; c < 2; ++c) {
    std::string owner{schema.text(0, c)};
    if (std::find(plan.owners.begin(), plan.owners.end(), owner)
        == plan.owners.end())
      plan.owners.push_back(owner);
  }
  std::string database{schema.text(0, 2)};
  bool grant_connect = schema.text(0, 3) == "t";
  // The groups: created when missing; an existing one must be a group.
  for (auto& g : groups) {
    auto r = conn.query(
      "SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = $1", g);
    if (r.rows() == 0) {
      plan.created_groups.push_back(g);
      continue;
    }
    if (r.text(0, 0) == "t" || r.text(0, 1) == "t")
      throw error{errc::other, "",
                  "role " + g
                    + " exists and can log in or is a superuser: a group of "
                      "`cmdbus grant` must be a NOLOGIN role (choose another "
                      "--prefix)"};
  }
  for (auto* list : {&req.workers, &req.operators, &req.readers})
    for (auto& name : *list)
      if (conn.query("SELECT 1 FROM pg_roles WHERE rolname = $1", name).rows()
            == 0
          && std::find(plan.missing_roles.begin(), plan.missing_roles.end(),
                       name)
               == plan.missing_roles.end())
        plan.missing_roles.push_back(name);
  for (auto& g : plan.created_groups)
    // A concurrent run on another database of the cluster may create the
    // same group between our check and this statement.
    plan.statements.push_back(
      "DO $$BEGIN CREATE ROLE " + quote_identifier(g)
      + " NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN "
        "NULL; END$$");
  add_rights(plan.statements, grant_connect ? database : std::string{},
             plan.groups, plan.owners);
  // A membership that exists is left out: GRANT would only say so (a
  // notice on every run).
  bool memberships = false;
  auto members = [&](const std::string& group,
                     const std::vector<std::string>& roles) {
    for (auto& role : roles) {
      auto held = conn.query("SELECT 1 FROM pg_auth_members m"
                             " JOIN pg_roles g ON g.oid = m.roleid"
                             " JOIN pg_roles r ON r.oid = m.member"
                             " WHERE g.rolname = $1 AND r.rolname = $2",
                             group, role);
      if (held.rows() > 0)
        continue;
      plan.statements.push_back("GRANT " + quote_identifier(group) + " TO "
                                + quote_identifier(role));
      memberships = true;
    }
  };
  members(plan.groups.worker, req.workers);
  members(plan.groups.operator_role, req.operators);
  members(plan.groups.reader, req.readers);
  if (plan.missing_roles.empty())
    check_rights(conn, plan, memberships);
  return plan;
}

std::vector<std::string> apply_grants(connection& conn,
                                      const grant_plan& plan) {
  conn.take_notices();
  transaction tx{conn};
  conn.query("SELECT pg_advisory_xact_lock($1::bigint)", migrate_lock_key);
  for (auto& sql : plan.statements)
    conn.exec(sql);
  tx.commit();
  return conn.take_notices();
}

} // namespace cmdbus::db
