#pragma once

// Least-privilege roles: the group roles of a worker, an operator and a
// reader, their rights on the objects of schemas commandbus and pgmq, and
// their members (`cmdbus grant`; docs/operations.md, "Roles"). Private: not
// installed.

#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::db {

/// The names of the three group roles.
struct role_groups {
  /// Runs `cmdbus worker`: reads, claims and finishes commands, writes
  /// replies, batch counters, process managers' and schedules' rows.
  std::string worker;
  /// Runs the operator commands (send, cancel, tsq, batch, schedule,
  /// process start) and creates queues.
  std::string operator_role;
  /// Reads everything, changes nothing.
  std::string reader;
};

/// Returns the groups `<prefix>_worker`, `<prefix>_operator` and
/// `<prefix>_reader`. Throws `invalid_argument` unless `prefix` is 1 to 54
/// lower-case letters, digits or underscores starting with a letter or an
/// underscore (so that every group name is a plain identifier of at most
/// 63 bytes).
role_groups role_groups_for(std::string_view prefix);

/// Throws `invalid_argument` unless `name` can name an existing login role:
/// 1 to 63 bytes, no NUL byte, not PUBLIC, not a reserved `pg_` name.
void validate_role_name(std::string_view name);

/// Returns `name` as a quoted SQL identifier ("..." with inner quotes
/// doubled).
std::string quote_identifier(std::string_view name);

/// What `cmdbus grant` is asked to do.
struct grant_request {
  /// The groups' prefix (role_groups_for).
  std::string prefix = "cmdbus";
  /// Existing (login) roles to make members of each group.
  std::vector<std::string> workers;
  std::vector<std::string> operators;
  std::vector<std::string> readers;
};

/// What `plan_grants` found and the statements that do the request.
struct grant_plan {
  role_groups groups;
  /// The groups that do not exist yet (the plan creates them).
  std::vector<std::string> created_groups;
  /// The roles whose future tables in commandbus and pgmq the groups get
  /// rights on (the schema's owner and the owner of the queue-creating
  /// function; usually one role, the one that ran `cmdbus migrate`).
  std::vector<std::string> owners;
  /// Roles of the request that do not exist: the plan is refused.
  std::vector<std::string> missing_roles;
  /// The statements, in order; idempotent each. Memberships that exist
  /// are left out.
  std::vector<std::string> statements;
};

/// Reads what the request needs (owners, existing roles) and returns the
/// statements that create the missing groups, grant the groups their rights
/// (also on the tables the owners create later: new queues, new migrations)
/// and make the requested roles members. Only reads. Throws
/// `invalid_argument` for a bad prefix or role name; `db::error` when the
/// database lacks the schema or migration V014, and (SQLSTATE 42501) when
/// the connected role may not run the statements: it must be an owner or a
/// member of it (or a superuser), and needs CREATEROLE to create a group or
/// to grant membership. The rights are checked only when every named role
/// exists (`missing_roles` empty).
grant_plan plan_grants(connection& conn, const grant_request& req);

/// Runs `plan.statements` in one transaction, serialised with other
/// `cmdbus grant` and `cmdbus migrate` runs on the database (their advisory
/// lock). Returns the server's warnings (e.g. "no privileges were granted"
/// for a table the connected role may not grant on). Throws `db::error` when
/// a statement fails (then nothing is changed).
std::vector<std::string> apply_grants(connection& conn, const grant_plan& plan);

} // namespace cmdbus::db
