#include "cmdbus/db/queues.hpp"

#include <string>

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
  conn.query("SELECT pgmq.create($1) WHERE NOT EXISTS (SELECT 1 FROM "
             "pgmq.meta WHERE queue_name = $1)",
             std::string{queue});
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
