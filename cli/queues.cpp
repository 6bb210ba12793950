#include "cmdbus/cli/queues.hpp"

#include "cmdbus/cli/failure.hpp"
#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::cli {

void require_queue(db::pool& pool, const std::string& queue, bool create) {
  db::validate_queue_name(queue);
  auto conn = pool.acquire();
  if (create) {
    conn->exec("SELECT pgmq.create($1)", {queue});
    return;
  }
  auto r = conn->exec("SELECT 1 FROM pgmq.meta WHERE queue_name = $1", {queue});
  if (r.rows() == 0)
    throw not_found{"queue " + queue
                    + " does not exist: check the domain's spelling, or pass "
                      "--create to create it"};
}

} // namespace cmdbus::cli
