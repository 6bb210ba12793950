#pragma once

// The bodies and parameters of the command API's requests
// (docs/api.yaml), read strictly: a body is at most max_body_bytes of
// valid JSON (depth and UTF-8 checked as for messages), an object with
// known fields only, each of its type and range; names and ids are
// validated. Whatever fails is an api_error with the status and message
// the client gets; nothing here touches the database.

#include <chrono>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/model/types.hpp"

namespace cmdbus::api {

/// Largest request body taken (the listener answers 413 beyond).
inline constexpr size_t max_body_bytes = 256 * 1024;

/// Most commands in one batch request.
inline constexpr size_t max_batch_commands = 1000;

/// The wait of a GET without ?wait=, and the longest one taken.
inline constexpr std::chrono::milliseconds default_wait{15000};
inline constexpr std::chrono::milliseconds max_wait{30000};

/// A request the API refuses: the HTTP status, a short machine-readable
/// code and a message for the client (never a secret).
class api_error : public std::runtime_error {
public:
  api_error(int status, std::string code, const std::string& message)
    : std::runtime_error(message), status_(status), code_(std::move(code)) {
    // nop
  }

  int status() const noexcept {
    return status_;
  }

  const std::string& code() const noexcept {
    return code_;
  }

private:
  int status_;
  std::string code_;
};

/// The body of POST /v1/domains/{domain}/commands, as sent.
struct send_body {
  send_request request;
  /// The client chose the command id (then a repeat is idempotent).
  bool id_given = false;
  /// What the request decides, as a JSON object, for its fingerprint
  /// (api/idempotency.hpp): each field as given (null when absent), the
  /// data as written, not_before as the instant it names, a delay as its
  /// milliseconds (not the time it gives, which moves on every repeat).
  std::string decided;
};

/// Checks a domain taken from a path (400 when it is not a valid name).
void check_domain(std::string_view domain);

/// A command id taken from a path (400 when it is not a UUID).
uuid parse_command_id(std::string_view text);

/// The ?wait= of a GET: "15s", "500ms", "2m" or a number of seconds; 0
/// answers at once. Unset: default_wait; 400 for anything else or for
/// more than max_wait.
std::chrono::milliseconds parse_wait(const std::optional<std::string>& text);

/// Reads a send body for `domain`: {type, data?, command_id?,
/// correlation_id?, reply_to?, max_attempts?, not_before? | delay?,
/// priority?}. A command id is generated when none is given.
send_body parse_send_body(const std::string& domain, std::string_view body);

/// The body of POST /v1/domains/{domain}/batches.
struct batch_body {
  std::vector<batch_command> commands;
  /// For each command, what it decides (as send_body::decided, marked as
  /// a batch's command) when the client chose its id; else empty.
  std::vector<std::string> decided;
  /// Generated when unset.
  std::optional<uuid> batch_id;
  std::optional<std::string> name;
  std::optional<json> custom_data;
};

/// Reads a batch body: {batch_id?, name?, custom_data?, commands: [ each
/// as a send body ]} with 1 to max_batch_commands commands.
batch_body parse_batch_body(std::string_view body);

} // namespace cmdbus::api
