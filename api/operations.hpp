#pragma once

// Every operation the command API serves, with every status it answers:
// the server checks its answers against this table, and a test checks the
// table against the OpenAPI description (docs/api.yaml) both ways.

#include <string_view>
#include <vector>

namespace cmdbus::api {

struct operation {
  /// "get" or "post" (as OpenAPI names methods).
  std::string_view method;
  /// The OpenAPI path template, e.g. "/v1/domains/{domain}/commands".
  std::string_view path;
  std::vector<int> statuses;
};

/// The operations, in the order docs/api.yaml lists them.
const std::vector<operation>& operations();

/// Indexes into operations().
enum class op { health = 0, send = 1, get = 2, batch = 3 };

/// Whether `op` declares `status` (the listener's own answers, 408, 411,
/// 413, 431 and 503, are listed where a request can draw them).
bool declares(op o, int status);

} // namespace cmdbus::api
