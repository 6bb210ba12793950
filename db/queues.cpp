#include "cmdbus/db/queues.hpp"

#include <string>

#include "cmdbus/db/error.hpp"

#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::db {

bool queue_exists(connection& conn, std::string_view queue) {
  validate_queue_name(queue);
  return conn
           .query("SELECT 1 FROM pgmq.meta WHERE queue_name = $1",
                  std::string{queue})
           .rows()
         > 0;
}

void create_queue(connection& conn, std::string_view queue) {
  validate_queue_name(queue);
  std::string name{queue};
  // One round trip when the queue exists (the usual case), without calling
  // any function that needs a right the caller may lack.
  auto r = conn.query(
    "SELECT EXISTS (SELECT 1 FROM pgmq.meta WHERE queue_name = $1),"
    " coalesce(has_function_privilege(to_regprocedure("
    "'commandbus.cmdbus_create_queue(text)'), 'EXECUTE'), false),"
    " current_user",
    name);
  if (r.text(0, 0) == "t")
    return;
  bool delegated = r.text(0, 1) == "t";
  std::string role{r.text(0, 2)};
  try {
    // The schema owner's function when the caller may call it (the owner,
    // an operator role): the queue's tables then belong to the owner, and
    // the roles `cmdbus grant` set up get their rights on them. Otherwise
    // PGMQ's own, with the caller's rights, as before V014.
    conn.query(delegated ? "SELECT commandbus.cmdbus_create_queue($1)"
                         : "SELECT pgmq.create($1)",
               name);
  } catch (const error& e) {
    if (e.sqlstate() != "42501")
      throw;
    throw error{e.code(), e.sqlstate(),
                "queue " + name + " does not exist and role " + role
                  + " may not create queues (" + e.what()
                  + "): an operator creates it with `cmdbus queues --create "
                  + name + "` (see `cmdbus grant --help`)"};
  }
  conn.take_notices();
}

std::string partman_missing_message(std::string_view queue,
                                    std::string_view database) {
  return "cannot create partitioned queue " + std::string{queue}
         + ": partitioned queues need the pg_partman extension, which is not "
           "installed in database "
         + std::string{database}
         + ". Install pg_partman on the database server (Debian: apt-get "
           "install postgresql-15-partman), then, as a superuser connected to "
           "that database, run: CREATE SCHEMA partman; CREATE EXTENSION "
           "pg_partman SCHEMA partman; (cmdbus never creates the extension "
           "itself)";
}

bool create_partitioned_queue(connection& conn, std::string_view queue,
                              const partition_spec& spec) {
  validate_queue_name(queue);
  std::string name{queue};
  auto r = conn.query(
    "SELECT (SELECT m.is_partitioned FROM pgmq.meta m WHERE m.queue_name = $1),"
    " EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_partman'),"
    " current_database(), current_user",
    name);
  if (!r.is_null(0, 0)) {
    if (r.text(0, 0) == "t")
      return false;
    throw error{errc::other, "55000",
                "queue " + name
                  + " exists and is not partitioned: a queue cannot be "
                    "converted; create the partitioned queue under another "
                    "name (or drop this one first)"};
  }
  if (r.text(0, 1) != "t")
    throw error{errc::other, "55000",
                partman_missing_message(name, r.text(0, 2))};
  std::string role{r.text(0, 3)};
  bool created = false;
  try {
    auto c = conn.query(
      "SELECT commandbus.cmdbus_create_partitioned_queue($1, $2, $3)", name,
      spec.interval, spec.retention);
    created = c.text(0, 0) == "t";
  } catch (const error& e) {
    if (e.sqlstate() == "22023")
      throw invalid_argument("cannot create partitioned queue " + name + ": "
                             + e.what());
    if (e.sqlstate() != "42501")
      throw;
    throw error{e.code(), e.sqlstate(),
                "role " + role + " may not create partitioned queue " + name
                  + " (" + e.what() + "): run `cmdbus queues --create " + name
                  + " --partitioned` as the schema's owner or an operator "
                    "role (see `cmdbus grant --help`)"};
  }
  conn.take_notices();
  return created;
}

connection::statement notify_statement(std::string_view queue) {
  return {"SELECT pg_notify($1, '')", {notify_channel(queue)}, "cmdbus_notify"};
}

void notify(connection& conn, std::string_view queue) {
  auto st = notify_statement(queue);
  conn.exec_prepared(st.name, st.sql, st.params);
}

} // namespace cmdbus::db
