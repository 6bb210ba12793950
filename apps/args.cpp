#include "apps/args.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <iterator>

#include "apps/values.hpp"
#include "cmdbus/db/dsn.hpp"

namespace cmdbus::cli {

namespace {

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

constexpr const char* database_exit_codes
  = "\nEvery command also exits 3 when the database is unavailable, 4 when "
    "it has\nno cmdbus schema (run `cmdbus migrate`) and 6 when the server "
    "refuses the\nlogin; `cmdbus --help` lists every exit code.\n";

} // namespace

std::string help_text(const command_spec& command) {
  std::string text = command.synopsis;
  if (!command.options.empty())
    text += "\nOptions:\n" + config::render_options(command.options);
  text += command.epilogue;
  if (command.database)
    text += database_exit_codes;
  return text;
}

int print_help(const command_spec& command) {
  std::cout << help_text(command);
  return exit_ok;
}

args::args(const std::vector<std::string>& argv,
           const std::vector<config::option>& options) {
  auto find = [&](const std::string& name) -> const config::option* {
    for (const auto& o : options)
      if (o.name == name || (!o.short_name.empty() && o.short_name == name))
        return &o;
    return nullptr;
  };
  bool options_ended = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const auto& a = argv[i];
    if (options_ended || a.size() < 2 || a[0] != '-') {
      positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      options_ended = true;
      continue;
    }
    std::string name = a;
    std::optional<std::string> value;
    if (auto eq = a.find('=');
        a.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    const auto* o = find(name);
    if (o == nullptr) {
      // The name only: a mistyped --dsn=... may carry a password.
      std::vector<std::string> known;
      for (const auto& x : options)
        known.emplace_back(x.name);
      throw usage_error{"unknown option '" + name + "'"
                        + config::did_you_mean(name, known)};
    }
    name = std::string{o->name};
    if (o->is_flag()) {
      if (value)
        throw usage_error{name + " takes no value"};
      flags_.push_back(name);
      continue;
    }
    if (!value) {
      if (i + 1 >= argv.size())
        throw usage_error{name + " needs a value"};
      value = argv[++i];
    }
    values_.emplace(name, *value);
  }
}

bool args::flag(const std::string& name) const {
  return contains(flags_, name);
}

std::optional<std::string> args::option(const std::string& name) const {
  auto [first, last] = values_.equal_range(name);
  if (first == last)
    return std::nullopt;
  return std::prev(last)->second;
}

std::vector<std::string> args::options(const std::string& name) const {
  std::vector<std::string> result;
  auto [first, last] = values_.equal_range(name);
  for (auto i = first; i != last; ++i)
    result.push_back(i->second);
  return result;
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

std::optional<std::chrono::milliseconds>
args::duration_option(const std::string& name) const {
  auto v = option(name);
  if (!v)
    return std::nullopt;
  return parse_duration(name, *v);
}

void args::expect_positional(size_t n, const std::string& usage) const {
  if (positional_.size() != n)
    throw usage_error{"expected " + usage + ", got "
                      + std::to_string(positional_.size())
                      + " positional argument(s)"};
}

std::string args::dsn() const {
  auto read = [](const std::string& path, const std::string& place) {
    try {
      return db::read_dsn_file(path);
    } catch (const db::invalid_argument& e) {
      throw usage_error{place + " cannot be used: " + e.what()};
    }
  };
  auto dsn = option(std::string{dsn_option.name});
  auto file = option(std::string{dsn_file_option.name});
  if (dsn && file)
    throw usage_error{"give --dsn or --dsn-file, not both"};
  if (file)
    return read(*file, "option --dsn-file");
  if (dsn)
    return *dsn;
  // An empty variable counts as unset, as for the worker.
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  auto env_dsn = env("CMDBUS_DSN");
  auto env_file = env("CMDBUS_DSN_FILE");
  if (!env_dsn.empty() && !env_file.empty())
    throw usage_error{
      "set CMDBUS_DSN or CMDBUS_DSN_FILE in the environment, not both"};
  if (!env_file.empty())
    return read(env_file, "environment variable CMDBUS_DSN_FILE");
  return env_dsn;
}

bool has_flag(const std::vector<std::string>& argv, const std::string& name) {
  auto end = std::find(argv.begin(), argv.end(), "--");
  return std::find(argv.begin(), end, name) != end;
}

int run_subcommand(const std::string& command,
                   const std::vector<std::string>& argv,
                   const command_spec& overview,
                   const std::vector<subcommand>& subcommands) {
  // The options before the subcommand's name (only --dsn and --dsn-file
  // take a value there) go behind it.
  std::vector<std::string> rest;
  size_t i = 0;
  while (i < argv.size() && argv[i].size() > 1 && argv[i][0] == '-'
         && argv[i] != "--help" && argv[i] != "-h" && argv[i] != "--") {
    rest.push_back(argv[i]);
    if ((argv[i] == dsn_option.name || argv[i] == dsn_file_option.name)
        && i + 1 < argv.size())
      rest.push_back(argv[++i]);
    ++i;
  }
  std::string name;
  if (i < argv.size()) {
    name = argv[i];
    rest.insert(rest.end(), argv.begin() + static_cast<long>(i) + 1,
                argv.end());
  }
  if (name == "--help" || name == "-h" || name == "help")
    return print_help(overview);
  std::vector<std::string> known;
  for (const auto& s : subcommands) {
    if (name == s.name) {
      args a{rest, *s.spec};
      if (a.help())
        return print_help(*s.spec);
      return s.run(a);
    }
    known.emplace_back(s.name);
  }
  std::string choices;
  for (size_t k = 0; k < known.size(); ++k)
    choices += (k == 0 ? "" : k + 1 == known.size() ? " or " : ", ") + known[k];
  if (name.empty())
    throw usage_error{"missing subcommand of " + command + ": " + choices};
  auto near = config::nearest(name, known);
  throw usage_error{"unknown " + command + " subcommand '" + name + "'"
                    + (near.empty() ? " (choose " + choices + ")"
                                    : "; did you mean " + near + "?")};
}

} // namespace cmdbus::cli
