#pragma once

// What every configuration of a cmdbus process shares (the worker's, a
// handler node's): addresses, the environment lookup and the errors. No CAF
// or libpq includes.

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cmdbus::config {

/// An address to listen on.
struct http_address {
  /// An IPv4 or IPv6 literal (without brackets) or a host name.
  std::string host;
  /// 0 lets the system pick a free port.
  int port = 0;
};

/// Parses "HOST:PORT", "[IPV6]:PORT" or ":PORT" (loopback, 127.0.0.1);
/// throws std::invalid_argument saying what is wrong.
http_address parse_http_address(std::string_view text);

/// A parse error (file, environment or command line) with its location, e.g.
/// "worker.ini:7: unknown key 'concurency' in section [worker]", or the list
/// of validation problems (one per line) thrown by load(). Never contains a
/// DSN password.
class config_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Thrown by apply_args() and load() when the command line contains --help or
/// -h: the caller prints the help (what(): worker_help(), or node_help() for
/// a node's command line) and exits with 0. Deliberately not a config_error.
class help_requested : public std::exception {
public:
  /// `text` is the help, a string that outlives the exception; nullptr
  /// stands for worker_help().
  explicit help_requested(const char* text = nullptr) noexcept : text_(text) {
    // nop
  }

  const char* what() const noexcept override;

private:
  const char* text_;
};

/// Looks up an environment variable by name (std::getenv in production, a map
/// in tests); std::nullopt when unset.
using env_lookup = std::function<std::optional<std::string>(const char*)>;

} // namespace cmdbus::config
