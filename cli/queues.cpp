#include "cmdbus/cli/queues.hpp"

#include "cmdbus/cli/failure.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"

namespace cmdbus::cli {

void require_queue(db::pool& pool, const std::string& queue, bool create) {
  db::validate_queue_name(queue);
  auto conn = pool.acquire();
  if (create) {
    db::create_queue(*conn, queue);
    return;
  }
  if (!db::queue_exists(*conn, queue))
    throw not_found{"queue " + queue
                    + " does not exist: check the domain's spelling, or pass "
                      "--create to create it"};
}

} // namespace cmdbus::cli
