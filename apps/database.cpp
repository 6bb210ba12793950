#include "apps/database.hpp"

#include <iostream>

#include "apps/args.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"

namespace cmdbus::cli {

db::pool_options pool_options_for(const args& a, size_t max_size) {
  db::pool_options opts;
  opts.dsn = a.dsn();
  opts.max_size = max_size;
  opts.connection.application_name = "cmdbus-cli";
  opts.log_failures = false;
  return opts;
}

void note_if_unknown_domain(db::pool& pool, const std::string& domain) {
  auto queue = db::command_queue(domain);
  auto conn = pool.acquire();
  if (!db::queue_exists(*conn, queue))
    std::cerr << "cmdbus: note: there is no queue " << queue
              << "; is the domain name right? (`cmdbus queues` lists the "
                 "queues)\n";
}

} // namespace cmdbus::cli
