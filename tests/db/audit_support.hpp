#pragma once

// Readers of commandbus.audit shared by the SQL tests of tests/db (the
// stored procedures and the worker functions), and a jsonb comparison.

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"

namespace cmdbus::audit_test {

/// One audit row: its event type and details_json as text.
struct audit_row {
  std::string event_type;
  std::optional<std::string> details;
};

/// Returns the audit trail of `id` (a command or batch id) in `domain`,
/// ordered by (ts, audit_id) (docs/design.md, "Audit order").
inline std::vector<audit_row> audit_trail(db::connection& c,
                                          const std::string& domain,
                                          const std::string& id) {
  auto res = c.query("SELECT event_type, details_json::text"
                     " FROM commandbus.audit"
                     " WHERE domain = $1 AND command_id = $2::uuid"
                     " ORDER BY ts, audit_id",
                     domain, id);
  std::vector<audit_row> out;
  for (int r = 0; r < res.rows(); ++r)
    out.push_back({std::string{res.text(r, 0)}, res.opt_text(r, 1)});
  return out;
}

/// Returns the event types of the audit trail of `id` in `domain`.
inline std::vector<std::string> audit_events(db::connection& c,
                                             const std::string& domain,
                                             const std::string& id) {
  std::vector<std::string> out;
  for (auto& row : audit_trail(c, domain, id))
    out.push_back(row.event_type);
  return out;
}

/// Returns how many audit rows of `event_type` the domain has.
inline int64_t count_events(db::connection& c, const std::string& domain,
                            const std::string& event_type) {
  return c
    .query("SELECT count(*) FROM commandbus.audit"
           " WHERE domain = $1 AND event_type = $2",
           domain, event_type)
    .int64(0, 0);
}

/// Compares two JSON documents as jsonb (key order and spacing ignored).
inline ::testing::AssertionResult
json_eq(db::connection& c, const std::optional<std::string>& actual,
        const std::string& expected) {
  if (!actual)
    return ::testing::AssertionFailure()
           << "JSON is NULL, expected " << expected;
  if (c.query("SELECT $1::jsonb = $2::jsonb", *actual, expected).boolean(0, 0))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "JSON " << *actual << " != expected " << expected;
}

} // namespace cmdbus::audit_test
