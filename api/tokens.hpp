#pragma once

// The bearer tokens of the command API and the domains each grants.
//
// Format (a file, or the environment variable CMDBUS_API_TOKENS with the
// same lines, where ';' may also end an entry): one token per line, then
// white space, then the domains it grants, comma-separated, or '*' for
// every domain:
//
//     # comment
//     3f9a0c...e1  payments,orders
//     8b7d22...40  *
//
// A token is 16 to 256 characters of A-Z a-z 0-9 and -._~+/= (e.g. the
// output of `openssl rand -hex 32`). Tokens are never logged or put in an
// error message; a line is named by its number. Each request's token is
// compared with every token, in time that does not depend on where the
// first differing byte is.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cmdbus::api {

/// What a request's Authorization header is allowed.
enum class access {
  /// The token grants the domain.
  granted,
  /// No bearer token (answer 401).
  missing,
  /// A token that is not one of ours (answer 401).
  unknown,
  /// A valid token that does not grant the domain (answer 403).
  forbidden,
};

class token_store {
public:
  /// Reads the tokens of `text` (the format above); `source` names it in
  /// errors ("tokens file /etc/..."). Throws std::invalid_argument for a
  /// malformed line, a duplicate token, an invalid domain, or no token at
  /// all.
  static token_store parse(std::string_view text, const std::string& source);

  /// The tokens of the file `path` (when not empty), else of the
  /// environment variable CMDBUS_API_TOKENS (`getenv`). Throws
  /// std::invalid_argument saying what to do: no tokens at all (naming
  /// `where` they may come from), a file that cannot be read or that
  /// others may read (mode 600 is needed), or what parse() refuses.
  static token_store load(
    const std::string& path,
    const std::function<const char*(const char*)>& getenv,
    const std::string& where);

  /// Decides on a request for `domain` with `authorization` (the header's
  /// value, "" without one).
  access check(std::string_view authorization, std::string_view domain) const;

  /// The number of tokens.
  size_t size() const noexcept {
    return grants_.size();
  }

private:
  struct grant {
    std::string token;
    bool every_domain = false;
    std::vector<std::string> domains;
  };
  std::vector<grant> grants_;
};

} // namespace cmdbus::api
