#include "cmdbus/db/transaction.hpp"

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::db {

transaction::transaction(connection& conn) : conn_(conn) {
  conn_.exec("BEGIN");
}

transaction::~transaction() {
  if (!done_)
    rollback_if_open(conn_);
}

void transaction::commit() {
  done_ = true;
  conn_.exec("COMMIT");
}

void rollback_if_open(connection& conn) noexcept {
  if (!conn.is_open() || !conn.in_transaction())
    return;
  try {
    conn.exec("ROLLBACK");
  } catch (const std::exception& e) {
    log::warn("rollback on {} failed: {}", conn.target(),
              log::one_line(e.what()));
  }
}

namespace detail {

void run_in_transaction(connection& conn,
                        const std::function<void(connection&)>& body) {
  if (conn.in_transaction()) {
    body(conn);
    return;
  }
  transaction tx{conn};
  body(conn);
  tx.commit();
}

void run_in_transaction(pool& pool,
                        const std::function<void(connection&)>& body) {
  auto conn = pool.acquire();
  run_in_transaction(*conn, body);
}

} // namespace detail

} // namespace cmdbus::db
