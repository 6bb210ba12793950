#include "api/tokens.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <sys/stat.h>

#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::api {

namespace {

bool is_token_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'
         || c == '~' || c == '+' || c == '/' || c == '=';
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_space(s.back()))
    s.remove_suffix(1);
  return s;
}

/// Whether `a` equals `b`, in time that depends on the lengths only (every
/// byte of `a` is looked at, whatever differs).
bool same_bytes(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  if (b.empty())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i])
            ^ static_cast<unsigned char>(b[i % b.size()]);
  return diff == 0;
}

} // namespace

token_store token_store::parse(std::string_view text,
                               const std::string& source) {
  token_store out;
  size_t line_no = 0;
  while (!text.empty()) {
    auto eol = text.find_first_of("\n;");
    auto line = trim(text.substr(0, eol));
    text = eol == std::string_view::npos ? std::string_view{}
                                         : text.substr(eol + 1);
    ++line_no;
    if (line.empty() || line.front() == '#')
      continue;
    auto where = source + ", entry " + std::to_string(line_no);
    auto split = line.find_first_of(" \t");
    if (split == std::string_view::npos)
      throw std::invalid_argument(where
                                  + ": a token needs its domains after "
                                    "it (a comma-separated list, or *)");
    auto token = line.substr(0, split);
    auto domains = trim(line.substr(split));
    if (token.size() < 16 || token.size() > 256
        || !std::all_of(token.begin(), token.end(), [](char c) {
             return is_token_char(static_cast<unsigned char>(c));
           }))
      throw std::invalid_argument(
        where
        + ": a token must be 16 to 256 characters of A-Z a-z 0-9 "
          "-._~+/=");
    grant g;
    g.token = std::string{token};
    if (domains == "*") {
      g.every_domain = true;
    } else {
      while (!domains.empty()) {
        auto comma = domains.find(',');
        auto d = trim(domains.substr(0, comma));
        domains = comma == std::string_view::npos ? std::string_view{}
                                                  : domains.substr(comma + 1);
        try {
          db::validate_domain(d);
        } catch (const std::exception& e) {
          throw std::invalid_argument(where + ": " + e.what());
        }
        g.domains.emplace_back(d);
      }
    }
    for (auto& other : out.grants_)
      if (other.token == g.token)
        throw std::invalid_argument(where + ": the token appears twice");
    out.grants_.push_back(std::move(g));
  }
  if (out.grants_.empty())
    throw std::invalid_argument(source + " has no token");
  return out;
}

access token_store::check(std::string_view authorization,
                          std::string_view domain) const {
  constexpr std::string_view scheme = "Bearer ";
  if (authorization.size() <= scheme.size())
    return access::missing;
  auto prefix = authorization.substr(0, scheme.size());
  bool bearer = std::equal(
    prefix.begin(), prefix.end(), scheme.begin(), [](char a, char b) {
      return std::tolower(static_cast<unsigned char>(a))
             == std::tolower(static_cast<unsigned char>(b));
    });
  if (!bearer)
    return access::missing;
  auto presented = trim(authorization.substr(scheme.size()));
  // Every token is compared, the match or not: the time says nothing about
  // which token is close.
  const grant* found = nullptr;
  for (auto& g : grants_)
    if (same_bytes(g.token, presented))
      found = &g;
  if (found == nullptr)
    return access::unknown;
  if (found->every_domain
      || std::find(found->domains.begin(), found->domains.end(), domain)
           != found->domains.end())
    return access::granted;
  return access::forbidden;
}

token_store token_store::load(
  const std::string& path,
  const std::function<const char*(const char*)>& getenv,
  const std::string& where) {
  if (!path.empty()) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw std::invalid_argument("tokens file " + path + " cannot be read");
    if ((st.st_mode & 077) != 0)
      throw std::invalid_argument("tokens file " + path
                                  + " may be read by others: chmod 600 it");
    std::ifstream in{path, std::ios::binary};
    std::ostringstream text;
    text << in.rdbuf();
    if (!in)
      throw std::invalid_argument("tokens file " + path + " cannot be read");
    return parse(text.str(), "tokens file " + path);
  }
  if (const char* v = getenv("CMDBUS_API_TOKENS"); v != nullptr && *v != '\0')
    return parse(v, "$CMDBUS_API_TOKENS");
  throw std::invalid_argument("the command API needs tokens: " + where);
}

} // namespace cmdbus::api
