// The external programs' settings: their rows in the worker's table
// (--exec, --exec-timeout, --exec-kill-grace, --exec-max-output,
// --exec-env and the [exec] section; [domains.NAME.exec] and
// [domains.NAME.types.TYPE] exec-timeout), the command-line splitting and
// the rules they must meet.

#include "cmdbus/config/exec_config.hpp"

#include <cctype>
#include <set>
#include <stdexcept>

#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/values.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::config {

std::map<std::string, std::string> exec_programs_of(const exec_config& cfg,
                                                    const std::string& domain) {
  auto out = cfg.programs;
  if (auto i = cfg.domain_programs.find(domain); i != cfg.domain_programs.end())
    for (const auto& [type, command] : i->second)
      out[type] = command;
  return out;
}

std::chrono::milliseconds exec_timeout_of(const exec_config& cfg,
                                          const std::string& domain,
                                          const std::string& type) {
  if (auto d = cfg.domain_type_timeouts.find(domain);
      d != cfg.domain_type_timeouts.end())
    if (auto t = d->second.find(type); t != d->second.end())
      return t->second;
  if (auto t = cfg.type_timeouts.find(type); t != cfg.type_timeouts.end())
    return t->second;
  return cfg.timeout;
}

std::vector<std::string> split_command(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word)
        words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (i + 1 < text.size())
        word += text[++i];
      continue;
    }
    if (c == '\'') {
      auto end = text.find('\'', i + 1);
      if (end == std::string_view::npos)
        throw std::invalid_argument("a ' quote is not closed");
      word.append(text.substr(i + 1, end - i - 1));
      i = end;
      continue;
    }
    if (c == '"') {
      size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size()
            && std::string_view{"\"\\$`"}.find(text[j + 1])
                 != std::string_view::npos)
          ++j;
        word += text[j];
      }
      if (j >= text.size())
        throw std::invalid_argument("a \" quote is not closed");
      i = j;
      continue;
    }
    word += c;
  }
  if (in_word)
    words.push_back(std::move(word));
  if (words.empty())
    throw std::invalid_argument("the command is empty");
  return words;
}

namespace {

bool is_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
    return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      return false;
  return true;
}

} // namespace

std::vector<std::string>
validate_exec(const exec_config& cfg, const std::vector<std::string>& domains) {
  using std::chrono::milliseconds;
  std::vector<std::string> problems;
  auto report = [&](std::string x) { problems.push_back(std::move(x)); };
  std::set<std::string> served{domains.begin(), domains.end()};
  auto check_program = [&](const std::string& where, const std::string& type,
                           const std::string& command) {
    if (type.empty())
      report(where + ": a command type is empty");
    try {
      split_command(command);
    } catch (const std::invalid_argument& e) {
      report(where + ": the command of type " + db::printable(type) + " ("
             + db::printable(command) + "): " + e.what());
    }
  };
  for (const auto& [type, command] : cfg.programs)
    check_program("exec", type, command);
  for (const auto& [domain, programs] : cfg.domain_programs) {
    if (served.count(domain) == 0)
      report("exec: " + db::printable(domain)
             + " is not a served domain (a [domains.NAME.exec] section must "
               "name one of the domains)");
    for (const auto& [type, command] : programs)
      check_program("exec of domain " + db::printable(domain), type, command);
  }
  auto timeout_ok = [&](const std::string& what, milliseconds x) {
    if (x < milliseconds{10} || x > std::chrono::hours{24})
      report(what + " (" + detail::ms_text(x)
             + ") must be between 10ms and 24h");
  };
  timeout_ok("exec-timeout", cfg.timeout);
  for (const auto& [type, x] : cfg.type_timeouts)
    timeout_ok("exec-timeout of type " + db::printable(type), x);
  for (const auto& [domain, types] : cfg.domain_type_timeouts) {
    if (served.count(domain) == 0)
      report("exec-timeout: " + db::printable(domain)
             + " is not a served domain");
    for (const auto& [type, x] : types)
      timeout_ok("exec-timeout of type " + db::printable(type) + " in domain "
                   + db::printable(domain),
                 x);
  }
  if (cfg.kill_grace < milliseconds{0}
      || cfg.kill_grace > std::chrono::minutes{10})
    report("exec-kill-grace (" + detail::ms_text(cfg.kill_grace)
           + ") must be between 0ms and 10min");
  if (cfg.max_output < 1024 || cfg.max_output > (int64_t{64} << 20))
    report("exec-max-output (" + std::to_string(cfg.max_output)
           + ") must be between 1024 and 67108864 bytes");
  for (const auto& name : cfg.env)
    if (!is_env_name(name))
      report("exec-env: " + db::printable(name)
             + " is not an environment variable name (letters, digits and "
               "'_', not starting with a digit)");
  return problems;
}

namespace detail {

namespace {

/// Splits "TYPE=VALUE" of an option; throws value_error with `expects`.
std::pair<std::string, std::string> split_pair(std::string_view text,
                                               const char* expects) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw value_error(expects);
  return {std::string{trim(text.substr(0, eq))},
          std::string{text.substr(eq + 1)}};
}

/// Stores `--exec TYPE=COMMAND` (for every served domain).
void store_exec_option(worker_config& cfg, const raw_value& v, bool) {
  auto [type, command] = split_pair(
    v.text, "expects TYPE=COMMAND (a command type and the program that runs "
            "it, e.g. Greet=\"python3 greet.py\")");
  if (type.empty())
    throw value_error("expects TYPE=COMMAND with a command type before "
                      "the '='");
  try {
    split_command(command);
  } catch (const std::invalid_argument& e) {
    throw value_error("expects TYPE=COMMAND; the command of " + type + ": "
                      + e.what());
  }
  cfg.exec.programs[type] = command;
}

/// Stores `--exec-timeout DUR` or `--exec-timeout TYPE=DUR` (the latter on
/// the command line only).
void store_exec_timeout(worker_config& cfg, const raw_value& v, bool lenient) {
  if (lenient && v.shape == raw_value::form::bare
      && v.text.find('=') != std::string::npos) {
    auto [type, dur] = split_pair(v.text, "expects DUR or TYPE=DUR");
    if (type.empty())
      throw value_error("expects TYPE=DUR with a command type before the "
                        "'='");
    cfg.exec.type_timeouts[type] = as_duration(bare(dur), false);
    return;
  }
  cfg.exec.timeout = as_duration(v, false);
}

} // namespace

void store_exec_entry(worker_config& cfg, const std::string& domain,
                      const std::string& type, const raw_value& v) {
  cfg.exec.domain_programs[domain][type] = as_string(v);
}

void store_exec_timeout_entry(worker_config& cfg, const std::string& domain,
                              const std::string& type, const raw_value& v) {
  cfg.exec.domain_type_timeouts[domain][type] = as_duration(v, false);
}

std::vector<setting<worker_config>> exec_settings() {
  using c = worker_config;
  using v = raw_value;
  return {
    {kind::string,
     "",
     "",
     nullptr,
     form::value,
     {"--exec", "TYPE=COMMAND",
      "run COMMAND for each command of type TYPE in every served domain: "
      "the command as JSON on its standard input, its JSON result on "
      "standard output, the outcome by its exit status (docs/exec.md); "
      "repeat for several types"},
     store_exec_option},
    {kind::duration,
     "exec",
     "timeout",
     "CMDBUS_EXEC_TIMEOUT",
     form::value,
     {"--exec-timeout", "[TYPE=]DUR",
      "how long a program may run before SIGTERM (a transient failure), "
      "10ms..24h; TYPE=DUR for one type (60s)"},
     store_exec_timeout},
    {kind::duration,
     "exec",
     "kill-grace",
     "CMDBUS_EXEC_KILL_GRACE",
     form::value,
     {"--exec-kill-grace", "DUR",
      "time between a program's SIGTERM and its SIGKILL, 0..10min (5s)"},
     [](c& x, const v& y, bool) { x.exec.kill_grace = as_duration(y, false); }},
    {kind::integer,
     "exec",
     "max-output",
     "CMDBUS_EXEC_MAX_OUTPUT",
     form::value,
     {"--exec-max-output", "BYTES",
      "bytes kept of a program's standard output and of its standard "
      "error; the rest is cut, 1024..67108864 (1048576)"},
     [](c& x, const v& y, bool) { x.exec.max_output = as_int(y); }},
    {kind::string_list,
     "exec",
     "env",
     "CMDBUS_EXEC_ENV",
     form::each,
     {"--exec-env", "NAME",
      "an environment variable the programs get from the worker's; repeat "
      "for several; replaces the list of the file and of $CMDBUS_EXEC_ENV "
      "(PATH,HOME,LANG,LC_ALL,TZ; nothing else, not the DSN)"},
     [](c& x, const v& y, bool) { x.exec.env = as_string_list(y); }},
  };
}

} // namespace detail

} // namespace cmdbus::config
