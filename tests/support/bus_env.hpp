#pragma once

// Sending commands in the database tests: a bus on a pool of the test
// database, a separate connection for checks, and requests to send.

#include <cstddef>
#include <string>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus::test {

/// Options of a pool of at most `max_size` connections to the test
/// database.
db::pool_options pool_options(size_t max_size = 4);

/// A pool, a bus on it and a separate connection for checks.
struct bus_env {
  explicit bus_env(size_t max_size = 4);

  db::pool pool;
  command_bus bus;
  db::connection conn;
};

/// A request for a new command `type` of `domain` with a random command id
/// and `data` (JSON text); everything else is left to the bus's defaults.
send_request make_req(const std::string& domain,
                      const std::string& type = "DebitAccount",
                      const std::string& data = "{}");

} // namespace cmdbus::test
