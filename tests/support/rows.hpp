#pragma once

// Readers of commandbus rows shared by the database tests.

#include <cstdint>
#include <optional>
#include <string>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::test {

/// A commandbus.batch row as the tests check it.
struct batch_row {
  std::string status;
  int64_t total = 0;
  int64_t completed = 0;
  int64_t canceled = 0;
  int64_t in_tsq = 0;
  int64_t failed = 0;
  std::optional<std::string> started_at;
  std::optional<std::string> completed_at;
};

/// Reads batch (domain, id); throws std::runtime_error when it is missing.
batch_row read_batch(db::connection& conn, const std::string& domain,
                     const std::string& id);

} // namespace cmdbus::test
