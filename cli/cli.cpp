#include "cmdbus/cli/cli.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/model/text.hpp"
#include "cmdbus/model/version.hpp"

namespace cmdbus::cli {

namespace {

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

std::string upper(std::string x) {
  for (auto& c : x)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return x;
}

// Whether a failure names an object of our schema (or PGMQ's functions):
// the database was never migrated.
bool schema_missing(const db::error& e) {
  if (e.code() != db::errc::undefined_table
      && e.code() != db::errc::undefined_function && e.sqlstate() != "3F000")
    return false;
  std::string what = e.what();
  // A missing queue table (pgmq.q_..., pgmq.a_...) is a missing queue,
  // not a missing schema.
  return what.find("commandbus.") != std::string::npos
         || (what.find("pgmq.") != std::string::npos
             && what.find("pgmq.q_") == std::string::npos
             && what.find("pgmq.a_") == std::string::npos)
         || what.find("schema \"commandbus\"") != std::string::npos
         || what.find("schema \"pgmq\"") != std::string::npos;
}

// What to do about a refused login, by its reason (see
// db::login_failure_sqlstate).
std::string login_advice(const db::error& e) {
  const auto& s = e.sqlstate();
  if (s == "28P01")
    return " (the server refused the password: check the password in --dsn, "
           "$CMDBUS_DSN or $PGPASSWORD; with password authentication the "
           "server gives this same answer for a user that does not exist)";
  if (s == "3D000")
    return " (the database does not exist on that server: check dbname in "
           "--dsn or $CMDBUS_DSN, or create it and run `cmdbus migrate`)";
  if (std::string{e.what()}.find("no pg_hba.conf entry") != std::string::npos)
    return " (the server's pg_hba.conf allows no connection from this host "
           "for this user and database: ask its administrator)";
  return " (the server knows no such user: check user in --dsn or "
         "$CMDBUS_DSN)";
}

} // namespace

std::string nearest(const std::string& given,
                    const std::vector<std::string>& candidates) {
  // An abbreviation of exactly one candidate ("--oldest") names it.
  std::string prefixed;
  int prefixes = 0;
  for (auto& c : candidates)
    if (given.size() >= 3 && c.size() > given.size()
        && c.compare(0, given.size(), given) == 0) {
      prefixed = c;
      ++prefixes;
    }
  if (prefixes == 1)
    return prefixed;
  std::string best;
  size_t best_distance = std::max<size_t>(2, given.size() / 3) + 1;
  for (auto& c : candidates) {
    auto d = edit_distance(given, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

subcommand take_subcommand(const std::vector<std::string>& argv) {
  subcommand out;
  size_t i = 0;
  while (i < argv.size() && argv[i].size() > 1 && argv[i][0] == '-'
         && argv[i] != "--help" && argv[i] != "-h" && argv[i] != "--") {
    out.argv.push_back(argv[i]);
    if (argv[i] == "--dsn" && i + 1 < argv.size())
      out.argv.push_back(argv[++i]);
    ++i;
  }
  if (i < argv.size()) {
    out.name = argv[i] == "-h" || argv[i] == "help" ? "--help" : argv[i];
    out.argv.insert(out.argv.end(), argv.begin() + static_cast<long>(i) + 1,
                    argv.end());
  }
  return out;
}

void unknown_subcommand(const std::string& command, const std::string& name,
                        const std::vector<std::string>& known) {
  std::string choices;
  for (size_t i = 0; i < known.size(); ++i)
    choices += (i == 0 ? "" : i + 1 == known.size() ? " or " : ", ") + known[i];
  if (name.empty())
    throw usage_error{"missing subcommand of " + command + ": " + choices};
  auto near = nearest(name, known);
  throw usage_error{"unknown " + command + " subcommand '" + name + "'"
                    + (near.empty() ? " (choose " + choices + ")"
                                    : "; did you mean " + near + "?")};
}

args::args(const std::vector<std::string>& argv,
           const std::vector<std::string>& flags,
           const std::vector<std::string>& options) {
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
    if (name == "-h")
      name = "--help";
    if (name == "-v")
      name = "--verbose";
    if (contains(flags, name)) {
      if (value)
        throw usage_error{name + " takes no value"};
      flags_.push_back(name);
    } else if (contains(options, name)) {
      if (!value) {
        if (i + 1 >= argv.size())
          throw usage_error{name + " needs a value"};
        value = argv[++i];
      }
      values_.emplace(name, *value);
    } else {
      // The name only: a mistyped --dsn=... may carry a password.
      std::vector<std::string> known = flags;
      known.insert(known.end(), options.begin(), options.end());
      auto near = nearest(name, known);
      throw usage_error{"unknown option '" + name + "'"
                        + (near.empty() ? "" : "; did you mean " + near + "?")};
    }
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
  if (auto v = option("--dsn"))
    return *v;
  if (const char* env = std::getenv("CMDBUS_DSN"))
    return env;
  return {};
}

void args::apply_tls_files(config::tls_config& tls) const {
  if (auto v = option("--tls-certificate"))
    tls.certificate = *v;
  if (auto v = option("--tls-key"))
    tls.key = *v;
  if (auto v = option("--tls-ca-file"))
    tls.ca_file = *v;
  if (auto v = option("--tls-ca-path"))
    tls.ca_path = *v;
}

uuid parse_uuid_arg(const std::string& what, const std::string& text) {
  auto id = uuid::parse(text);
  if (!id)
    throw usage_error{what + " is not a valid UUID: '" + text + "'"};
  return *id;
}

json parse_json_arg(const std::string& what, const std::string& text) {
  std::string source = text;
  if (text == "-" || (!text.empty() && text[0] == '@')) {
    std::ostringstream content;
    if (text == "-") {
      content << std::cin.rdbuf();
    } else {
      std::ifstream in{text.substr(1), std::ios::binary};
      if (!in)
        throw usage_error{what + ": cannot read " + text.substr(1) + ": "
                          + std::strerror(errno)};
      content << in.rdbuf();
    }
    source = content.str();
  }
  try {
    return json::parse(source);
  } catch (const decode_error& e) {
    throw usage_error{what + " is not valid JSON: " + e.what()};
  }
}

json parse_object_arg(const std::string& what, const std::string& text) {
  auto value = parse_json_arg(what, text);
  if (!value.is_object())
    throw usage_error{what + " must be a JSON object"};
  return value;
}

command_status parse_status_arg(const std::string& what,
                                const std::string& text) {
  auto name = upper(text);
  if (name == "TSQ")
    name = "IN_TROUBLESHOOTING_QUEUE";
  if (auto s = parse_command_status(name))
    return *s;
  throw usage_error{what + ": unknown status '" + text
                    + "' (choose PENDING, IN_PROGRESS, COMPLETED, FAILED, "
                      "CANCELED or IN_TROUBLESHOOTING_QUEUE, in any case)"};
}

batch_status parse_batch_status_arg(const std::string& what,
                                    const std::string& text) {
  if (auto s = parse_batch_status(upper(text)))
    return *s;
  throw usage_error{what + ": unknown batch status '" + text
                    + "' (choose PENDING, IN_PROGRESS, COMPLETED or "
                      "COMPLETED_WITH_FAILURES, in any case)"};
}

std::chrono::milliseconds parse_duration(const std::string& what,
                                         const std::string& text) {
  size_t pos = 0;
  double n = -1;
  try {
    n = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  auto unit = text.substr(pos);
  double scale = 0;
  if (unit.empty() || unit == "s")
    scale = 1000;
  else if (unit == "ms")
    scale = 1;
  else if (unit == "m" || unit == "min")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else if (unit == "d")
    scale = 86'400'000;
  if (pos == 0 || scale == 0 || !std::isfinite(n) || n < 0)
    throw usage_error{what + ": '" + text
                      + "' is not a duration (a number with unit ms, s, m, h "
                        "or d, e.g. 90s or 15m)"};
  return std::chrono::milliseconds{
    static_cast<int64_t>(std::llround(n * scale))};
}

db::pool_options pool_options_for(const args& a, size_t max_size) {
  db::pool_options opts;
  opts.dsn = a.dsn();
  opts.max_size = max_size;
  opts.connection.application_name = "cmdbus-cli";
  opts.log_failures = false;
  return opts;
}

void require_queue(db::pool& pool, const std::string& queue, bool create) {
  db::validate_queue_name(queue);
  auto conn = pool.acquire();
  if (create) {
    conn->exec("SELECT pgmq.create($1)", {queue});
    return;
  }
  auto r = conn->exec("SELECT 1 FROM pgmq.meta WHERE queue_name = $1", {queue});
  if (r.rows() == 0)
    throw not_found{"queue " + queue
                    + " does not exist: check the domain's spelling, or pass "
                      "--create to create it"};
}

void note_if_unknown_domain(db::pool& pool, const std::string& domain) {
  auto queue = db::command_queue(domain);
  auto conn = pool.acquire();
  if (conn->query("SELECT 1 FROM pgmq.meta WHERE queue_name = $1", queue).rows()
      == 0)
    std::cerr << "cmdbus: note: there is no queue " << queue
              << "; is the domain name right? (`cmdbus queues` lists the "
                 "queues)\n";
}

namespace {

// Removes every `OPTION VALUE` or `OPTION=VALUE` from `argv` and returns the
// last VALUE; `choices` completes the message for a missing value.
std::optional<std::string> take_global_value(std::vector<std::string>& argv,
                                             std::string_view option,
                                             std::string_view choices) {
  std::optional<std::string> given;
  for (size_t i = 0; i < argv.size();) {
    std::string_view arg = argv[i];
    auto at = argv.begin() + static_cast<std::ptrdiff_t>(i);
    if (arg == option) {
      if (i + 1 >= argv.size())
        throw usage_error{std::string{option} + " needs a value ("
                          + std::string{choices} + ")"};
      given = argv[i + 1];
      argv.erase(at, at + 2);
    } else if (arg.size() > option.size()
               && arg.substr(0, option.size()) == option
               && arg[option.size()] == '=') {
      given = std::string{arg.substr(option.size() + 1)};
      argv.erase(at);
    } else {
      ++i;
    }
  }
  return given;
}

} // namespace

std::optional<std::string> take_log_level(std::vector<std::string>& argv) {
  return take_global_value(argv, "--log-level",
                           "trace, debug, info, warn, error, critical or off");
}

std::optional<std::string> take_log_format(std::vector<std::string>& argv) {
  return take_global_value(argv, "--log-format", "text, json or journal");
}

void set_log_format(const std::optional<std::string>& given) {
  auto f = log::format::text;
  try {
    f = log::format_from_env();
  } catch (const std::invalid_argument& e) {
    throw usage_error{std::string{"CMDBUS_LOG_FORMAT: "} + e.what()};
  }
  if (given) {
    try {
      f = log::parse_format(*given);
    } catch (const std::invalid_argument& e) {
      throw usage_error{std::string{"--log-format: "} + e.what()};
    }
  }
  log::set_format(f);
}

void set_log_level(const std::string& command,
                   const std::optional<std::string>& given) {
  auto level = command == "worker" || command == "node" ? spdlog::level::info
                                                        : spdlog::level::warn;
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

void print_fields(
  std::ostream& out,
  const std::vector<std::pair<std::string, std::string>>& rows) {
  size_t width = 0;
  for (auto& row : rows)
    width = std::max(width, row.first.size());
  for (auto& [name, value] : rows)
    out << name << std::string(width - name.size() + 2, ' ') << value << '\n';
}

void print_help(const char* text) {
  std::cout << text
            << "\nEvery command also exits 3 when the database is unavailable, "
               "4 when it has\nno cmdbus schema (run `cmdbus migrate`) and 6 "
               "when the server refuses the\nlogin; `cmdbus --help` lists "
               "every exit code.\n";
}

bool stdout_is_terminal() {
  return isatty(STDOUT_FILENO) == 1;
}

bool take_flag(std::vector<std::string>& argv, const std::string& flag) {
  auto end = std::find(argv.begin(), argv.end(), "--");
  auto kept = std::remove(argv.begin(), end, flag);
  bool found = kept != end;
  argv.erase(kept, end);
  return found;
}

bool wants_json(const std::vector<std::string>& argv) {
  for (auto& a : argv) {
    if (a == "--")
      return false;
    if (a == "--json")
      return true;
  }
  return false;
}

failure describe_failure(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const usage_error& e) {
    return {exit_usage, e.message};
  } catch (const not_found& e) {
    return {exit_not_found, e.message};
  } catch (const exit_with& e) {
    return {e.code, e.message};
  } catch (const db::invalid_argument& e) {
    return {exit_usage, e.what()};
  } catch (const decode_error& e) {
    return {exit_usage, e.what()};
  } catch (const keyed_error& e) {
    // duplicate command, unknown command or batch
    return {exit_not_found, e.what()};
  } catch (const invalid_operation_error& e) {
    return {exit_not_found, e.what()};
  } catch (const db::error& e) {
    if (db::is_login_refused(e))
      return {exit_auth, std::string{e.what()} + login_advice(e)};
    if (e.code() == db::errc::connection) {
      std::string what = e.what();
      return {exit_db_unavailable,
              what
                + (what.find("Is the server running") != std::string::npos
                     ? " (check host and port in --dsn or $CMDBUS_DSN)"
                     : " (is the server running, and are host and port in "
                       "--dsn or $CMDBUS_DSN right?)")};
    }
    if (schema_missing(e)) {
      log::debug("no cmdbus schema: {}", log::one_line(e.what()));
      return {exit_failed, never_migrated};
    }
    return {exit_failed, e.what()};
  } catch (const std::exception& e) {
    return {exit_failed, e.what()};
  }
}

int report_failure(const failure& f, const std::string& program, bool json) {
  if (json) {
    json_out out;
    out.begin_object()
      .field("error", f.message)
      .field("exit_code", f.code)
      .end_object();
    out.print(std::cout);
  } else {
    std::cerr << program << ": " << f.message << '\n';
  }
  return f.code;
}

int program_main(int argc, char** argv, const std::string& program,
                 const std::string& command,
                 const std::function<int(const std::vector<std::string>&)>& run) {
  std::vector<std::string> arguments(argv + 1, argv + argc);
  bool json = wants_json(arguments);
  try {
    auto level = take_log_level(arguments);
    auto format = take_log_format(arguments);
    set_log_level(command, level);
    set_log_format(format);
    auto end = std::find(arguments.begin(), arguments.end(), "--");
    if (std::find(arguments.begin(), end, "--version") != end) {
      std::cout << program << " (cmdbus " << version() << ")\n";
      return exit_ok;
    }
    return run(arguments);
  } catch (...) {
    auto f = describe_failure(std::current_exception());
    if (f.code == exit_usage && f.message.find("--help`") == std::string::npos)
      f.message += " (see `" + program + " --help`)";
    return report_failure(f, program, json);
  }
}

} // namespace cmdbus::cli
