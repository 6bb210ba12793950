#include "cmdbus/db/dsn.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <libpq-fe.h>
#include <sys/stat.h>

#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::db {

namespace {

// -- libpq's reading of a DSN ------------------------------------------------

/// The options that libpq's PQconninfoParse reads from a DSN; invalid when
/// libpq cannot parse it. Options the DSN does not set have no value.
class parsed_dsn {
public:
  explicit parsed_dsn(std::string_view dsn) {
    std::string text{dsn};
    char* err = nullptr;
    opts_ = PQconninfoParse(text.c_str(), &err);
    // The message may quote the DSN; it is never shown.
    PQfreemem(err);
  }

  ~parsed_dsn() {
    if (opts_ != nullptr)
      PQconninfoFree(opts_);
  }

  parsed_dsn(const parsed_dsn&) = delete;
  parsed_dsn& operator=(const parsed_dsn&) = delete;

  bool valid() const noexcept {
    return opts_ != nullptr;
  }

  /// The options in libpq's order, ending with a null keyword.
  const PQconninfoOption* options() const noexcept {
    return opts_;
  }

  /// Returns the value of `keyword`, or "" when the DSN does not set it.
  std::string get(std::string_view keyword) const {
    for (auto* o = opts_; o->keyword != nullptr; ++o)
      if (keyword == o->keyword && o->val != nullptr)
        return o->val;
    return {};
  }

  /// Returns whether `keyword` names an option that libpq keeps secret.
  bool secret(std::string_view keyword) const {
    for (auto* o = opts_; o->keyword != nullptr; ++o)
      if (keyword == o->keyword)
        return is_secret(*o);
    return false;
  }

  /// Returns whether the DSN sets a secret option.
  bool has_secret() const {
    for (auto* o = opts_; o->keyword != nullptr; ++o)
      if (o->val != nullptr && is_secret(*o))
        return true;
    return false;
  }

  /// libpq marks the options to hide in a connection dialog with "*".
  static bool is_secret(const PQconninfoOption& o) {
    return o.dispchar != nullptr && o.dispchar[0] == '*';
  }

private:
  PQconninfoOption* opts_ = nullptr;
};

/// Returns whether the two DSNs set the same options to the same values,
/// except that `masked_dsn` has `***` for every secret that `dsn` sets.
bool same_but_masked(const parsed_dsn& dsn, const parsed_dsn& masked_dsn) {
  auto* a = dsn.options();
  auto* b = masked_dsn.options();
  for (; a->keyword != nullptr && b->keyword != nullptr; ++a, ++b) {
    if (std::strcmp(a->keyword, b->keyword) != 0)
      return false;
    if ((a->val == nullptr) != (b->val == nullptr))
      return false;
    if (a->val == nullptr)
      continue;
    const char* expected = parsed_dsn::is_secret(*a) ? "***" : a->val;
    if (std::strcmp(b->val, expected) != 0)
      return false;
  }
  return a->keyword == nullptr && b->keyword == nullptr;
}

// -- where the secrets are written -------------------------------------------

/// A part [first, last) of the DSN's text.
struct span {
  size_t first;
  size_t last;
};

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

/// The values of secret options in a key=value DSN, read the way libpq does:
/// `key = value` pairs separated by spaces, a value either bare up to the
/// next space or in single quotes, a backslash escaping the next character.
std::vector<span> secrets_of_keywords(std::string_view dsn,
                                      const parsed_dsn& parsed) {
  std::vector<span> out;
  size_t i = 0;
  auto n = dsn.size();
  auto skip_spaces = [&] {
    while (i < n && is_space(dsn[i]))
      ++i;
  };
  while (true) {
    skip_spaces();
    if (i >= n)
      break;
    auto key_first = i;
    while (i < n && dsn[i] != '=' && !is_space(dsn[i]))
      ++i;
    auto key = dsn.substr(key_first, i - key_first);
    skip_spaces();
    if (i >= n || dsn[i] != '=')
      break; // libpq parsed it, so this does not happen
    ++i;
    skip_spaces();
    auto value_first = i;
    if (i < n && dsn[i] == '\'') {
      ++i;
      while (i < n && dsn[i] != '\'')
        i += dsn[i] == '\\' ? 2 : 1;
      i = std::min(i + 1, n);
    } else {
      while (i < n && !is_space(dsn[i]))
        i += dsn[i] == '\\' ? 2 : 1;
      i = std::min(i, n);
    }
    if (parsed.secret(key))
      out.push_back({value_first, i});
  }
  return out;
}

/// The secrets of a postgresql:// URI, read the way libpq does: the password
/// of the user information (the text before the first '@' that comes before
/// any '/'; the password follows its first ':'), and the values of secret
/// query parameters (`?password=...&...`).
std::vector<span> secrets_of_uri(std::string_view dsn,
                                 const parsed_dsn& parsed) {
  std::vector<span> out;
  auto start = dsn.find("://") + 3;
  auto rest = start;
  auto end = dsn.find_first_of("@/", start);
  if (end != std::string_view::npos && dsn[end] == '@') {
    auto colon = dsn.find(':', start);
    if (colon < end)
      out.push_back({colon + 1, end});
    rest = end + 1;
  }
  for (auto q = dsn.find('?', rest); q != std::string_view::npos;) {
    auto first = q + 1;
    auto amp = dsn.find('&', first);
    auto last = amp == std::string_view::npos ? dsn.size() : amp;
    auto param = dsn.substr(first, last - first);
    auto eq = param.find('=');
    if (eq != std::string_view::npos && parsed.secret(param.substr(0, eq)))
      out.push_back({first + eq + 1, last});
    q = amp;
  }
  return out;
}

bool is_uri(std::string_view dsn) {
  // libpq's own test: these two prefixes, in this case.
  for (std::string_view prefix : {"postgresql://", "postgres://"})
    if (dsn.substr(0, prefix.size()) == prefix)
      return true;
  return false;
}

/// Returns `dsn` with each span replaced by `***`.
std::string splice(std::string_view dsn, const std::vector<span>& spans) {
  std::string out;
  size_t pos = 0;
  for (const auto& s : spans) {
    out.append(dsn.substr(pos, s.first - pos));
    out.append(masked);
    pos = s.last;
  }
  out.append(dsn.substr(pos));
  return out;
}

/// Writes the options as a key=value DSN, with its secrets masked: what
/// mask_dsn() returns when the DSN's own text does not let it mask exactly
/// the secrets (e.g. a percent-encoded keyword in a URI).
std::string rebuild(const parsed_dsn& parsed) {
  std::string out;
  for (auto* o = parsed.options(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr)
      continue;
    if (!out.empty())
      out += ' ';
    out += o->keyword;
    out += '=';
    std::string_view val = parsed_dsn::is_secret(*o) ? masked : o->val;
    bool plain = !val.empty()
                 && std::none_of(val.begin(), val.end(), [](char c) {
                      return is_space(c) || c == '\'' || c == '\\';
                    });
    if (plain) {
      out += val;
      continue;
    }
    out += '\'';
    for (char c : val) {
      if (c == '\'' || c == '\\')
        out += '\\';
      out += c;
    }
    out += '\'';
  }
  return out;
}

} // namespace

// -- public API --------------------------------------------------------------

std::string mask_dsn(std::string_view dsn) {
  parsed_dsn parsed{dsn};
  if (!parsed.valid())
    return std::string{masked};
  if (!parsed.has_secret())
    return std::string{dsn};
  auto text = splice(dsn, is_uri(dsn) ? secrets_of_uri(dsn, parsed)
                                      : secrets_of_keywords(dsn, parsed));
  // libpq has the last word: the masked text must read as the DSN with only
  // its secrets changed.
  if (parsed_dsn check{text}; check.valid() && same_but_masked(parsed, check))
    return text;
  return rebuild(parsed);
}

std::string describe_target(const std::string& dsn) {
  parsed_dsn parsed{dsn};
  if (!parsed.valid())
    return "(invalid connection string)";
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  auto pick = [&](const char* key, const char* env_name, const char* dflt) {
    auto v = parsed.get(key);
    if (v.empty())
      v = env(env_name);
    return v.empty() ? std::string{dflt} : v;
  };
  auto host = parsed.get("host");
  if (host.empty())
    host = parsed.get("hostaddr");
  if (host.empty())
    host = env("PGHOST");
  if (host.empty())
    host = "(default socket)";
  auto user = pick("user", "PGUSER", "(default user)");
  auto port = pick("port", "PGPORT", "5432");
  auto dbname = pick("dbname", "PGDATABASE", "(default db)");
  return user + "@" + host + ":" + port + "/" + dbname;
}

std::string read_dsn_file(const std::string& path) {
  auto fail = [&](const std::string& why) {
    return invalid_argument("DSN file " + printable(path) + ": " + why);
  };
  if (path.empty())
    throw invalid_argument("the DSN file's name is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw fail("not a regular file");
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o",
                  static_cast<unsigned>(st.st_mode & 07777));
    throw fail(std::string{"its group or others have access (mode "} + mode
               + "), and it may hold a password: allow its owner alone "
                 "(chmod 600 FILE)");
  }
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw fail(std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad())
    throw fail("cannot be read");
  auto text = buf.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  if (text.empty())
    throw fail("empty (it should hold a connection string)");
  return text;
}

} // namespace cmdbus::db
