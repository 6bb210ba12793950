#include "tests/support/rows.hpp"

#include <stdexcept>

namespace cmdbus::test {

batch_row read_batch(db::connection& conn, const std::string& domain,
                     const std::string& id) {
  auto res = conn.query(
    "SELECT status, total_count, completed_count, canceled_count,"
    " in_troubleshooting_count, failed_count, started_at, completed_at"
    " FROM commandbus.batch WHERE domain = $1 AND batch_id = $2::uuid",
    domain, id);
  if (res.rows() != 1)
    throw std::runtime_error("batch row not found");
  batch_row row;
  row.status = std::string{res.text(0, 0)};
  row.total = res.int64(0, 1);
  row.completed = res.int64(0, 2);
  row.canceled = res.int64(0, 3);
  row.in_tsq = res.int64(0, 4);
  row.failed = res.int64(0, 5);
  row.started_at = res.opt_text(0, 6);
  row.completed_at = res.opt_text(0, 7);
  return row;
}

} // namespace cmdbus::test
