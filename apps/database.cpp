#include "apps/database.hpp"

#include <cstdlib>
#include <iostream>

#include "apps/args.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"

namespace cmdbus::cli {

db::pooler_mode pooler_of_environment() {
  const char* text = std::getenv("CMDBUS_POOLER");
  if (text == nullptr || *text == '\0')
    return db::pooler_mode::none;
  if (auto mode = db::parse_pooler(text))
    return *mode;
  throw usage_error{"CMDBUS_POOLER expects none, session or transaction"};
}

db::pool_options pool_options_for(const args& a, size_t max_size) {
  db::pool_options opts;
  opts.dsn = a.dsn();
  opts.max_size = max_size;
  opts.connection.application_name = "cmdbus-cli";
  opts.connection.pooler = pooler_of_environment();
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
