#pragma once

// A send request checked and encoded, ready for any of the send paths (one
// statement, a combined transaction, an INSERT or COPY chunk).

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"

namespace cmdbus::db {

/// A command ready to send: its request's fields, the generated ones filled
/// in, and its PGMQ message encoded.
struct prepared_command {
  std::string domain;
  /// The domain's command queue (`{domain}__commands`), validated.
  std::string queue;
  std::string command_type;
  uuid command_id;
  /// The message as stored in the queue (model/wire.hpp).
  std::string message;
  /// The request's, or a generated one.
  uuid correlation_id;
  std::optional<std::string> reply_to;
  /// The request's, or the bus's default when unset or 0.
  int max_attempts = 0;
  std::optional<uuid> batch_id;
  /// The request's not-before time; unset for a command due at once.
  std::optional<timestamp> not_before;
};

/// Checks what can be checked without the database and returns the
/// request's command queue. Throws `db::invalid_argument` for an invalid
/// domain or reply_to, `command_bus_error` for an empty command type or data
/// that is not a JSON object.
std::string validated_queue(const send_request& req);

/// Validates and encodes `req`; `default_max_attempts` replaces an unset or
/// zero max_attempts.
prepared_command prepare(const send_request& req, int default_max_attempts);

/// Throws `duplicate_command_error` for a (domain, command_id) that appears
/// twice among `n` keys; `key_of(i)` returns a pair of
/// (const std::string* domain, uuid command_id).
template <class F>
void check_unique(size_t n, F&& key_of) {
  std::vector<std::pair<const std::string*, uuid>> keys;
  keys.reserve(n);
  for (size_t i = 0; i < n; ++i)
    keys.push_back(key_of(i));
  auto less = [](const auto& a, const auto& b) {
    auto c = a.first->compare(*b.first);
    return c < 0 || (c == 0 && a.second < b.second);
  };
  std::sort(keys.begin(), keys.end(), less);
  for (size_t i = 1; i < keys.size(); ++i)
    if (*keys[i].first == *keys[i - 1].first
        && keys[i].second == keys[i - 1].second)
      throw duplicate_command_error(*keys[i].first, keys[i].second);
}

} // namespace cmdbus::db
