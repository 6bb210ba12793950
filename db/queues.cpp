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

connection::statement notify_statement(std::string_view queue) {
  return {"SELECT pg_notify($1, '')", {notify_channel(queue)}, "cmdbus_notify"};
}

void notify(connection& conn, std::string_view queue) {
  auto st = notify_statement(queue);
  conn.exec_prepared(st.name, st.sql, st.params);
}

} // namespace cmdbus::db
