#include "apps/cli.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "model/log.hpp"

namespace cmdbus::cli {

args::args(const std::vector<std::string>& argv,
           const std::vector<std::string>& flags,
           const std::vector<std::string>& options) {
  auto is = [](const std::vector<std::string>& xs, const std::string& x) {
    return std::find(xs.begin(), xs.end(), x) != xs.end();
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const auto& a = argv[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a;
    std::optional<std::string> value;
    if (auto eq = a.find('=');
        a.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    if (name == "-h")
      name = "--help";
    if (name == "-v")
      name = "--verbose";
    if (is(flags, name)) {
      if (value)
        throw usage_error{name + " takes no value"};
      flags_.push_back(name);
    } else if (is(options, name)) {
      if (!value) {
        if (i + 1 >= argv.size())
          throw usage_error{name + " needs a value"};
        value = argv[++i];
      }
      values_[name] = *value;
    } else {
      // The name only: a mistyped --dsn=... may carry a password.
      throw usage_error{"unknown argument '" + name + "'"};
    }
  }
}

bool args::flag(const std::string& name) const {
  return std::find(flags_.begin(), flags_.end(), name) != flags_.end();
}

std::optional<std::string> args::option(const std::string& name) const {
  auto i = values_.find(name);
  if (i == values_.end())
    return std::nullopt;
  return i->second;
}

std::optional<int> args::int_option(const std::string& name,
                                    int min_value) const {
  auto v = option(name);
  if (!v)
    return std::nullopt;
  try {
    size_t pos = 0;
    auto n = std::stoi(*v, &pos);
    if (pos == v->size() && n >= min_value)
      return n;
  } catch (const std::exception&) {
    // reported below
  }
  throw usage_error{name + " must be an integer >= " + std::to_string(min_value)
                    + ", got '" + *v + "'"};
}

void args::expect_positional(size_t n, const std::string& usage) const {
  if (positional_.size() != n)
    throw usage_error{"expected " + usage};
}

std::string args::dsn() const {
  if (auto v = option("--dsn"))
    return *v;
  if (const char* env = std::getenv("CMDBUS_DSN"))
    return env;
  return {};
}

std::optional<std::string> take_log_level(std::vector<std::string>& argv) {
  constexpr std::string_view option = "--log-level";
  std::optional<std::string> given;
  for (size_t i = 0; i < argv.size();) {
    std::string_view arg = argv[i];
    auto at = argv.begin() + static_cast<std::ptrdiff_t>(i);
    if (arg == option) {
      if (i + 1 >= argv.size())
        throw usage_error{"--log-level needs a value (trace, debug, info, "
                          "warn, error, critical or off)"};
      given = argv[i + 1];
      argv.erase(at, at + 2);
    } else if (arg.substr(0, option.size() + 1) == "--log-level=") {
      given = std::string{arg.substr(option.size() + 1)};
      argv.erase(at);
    } else {
      ++i;
    }
  }
  return given;
}

void set_log_level(const std::string& command,
                   const std::optional<std::string>& given) {
  auto level = command == "worker" ? spdlog::level::info : spdlog::level::warn;
  try {
    level = log::level_from_env(level);
  } catch (const std::invalid_argument& e) {
    throw usage_error{std::string{"CMDBUS_LOG_LEVEL: "} + e.what()};
  }
  if (given) {
    try {
      level = log::parse_level(*given);
    } catch (const std::invalid_argument& e) {
      throw usage_error{std::string{"--log-level: "} + e.what()};
    }
  }
  log::set_level(level);
}

std::string json_string(const std::string& s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xf];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c)
    width[c] = header[c].size();
  for (auto& row : rows)
    for (size_t c = 0; c < row.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < width.size(); ++c) {
      std::string cell = c < cells.size() ? cells[c] : "";
      out << cell;
      if (c + 1 < width.size())
        out << std::string(width[c] - cell.size() + 2, ' ');
    }
    out << '\n';
  };
  line(header);
  std::vector<std::string> rule;
  for (auto w : width)
    rule.emplace_back(w, '-');
  line(rule);
  for (auto& row : rows)
    line(row);
}

} // namespace cmdbus::cli
