#pragma once

// Command types run by external programs (`cmdbus worker --exec
// TYPE=COMMAND`, [domains.NAME.exec] TYPE = "COMMAND"; docs/exec.md): which
// program runs which type, its bounds, and the environment it gets. No CAF
// includes.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cmdbus::config {

/// The external programs of a worker and how they run.
struct exec_config {
  /// Programs by command type for every served domain (--exec
  /// TYPE=COMMAND, repeatable).
  std::map<std::string, std::string> programs;

  /// Programs by domain and command type ([domains.NAME.exec] TYPE =
  /// "COMMAND"); for its domain, an entry here wins over `programs`.
  std::map<std::string, std::map<std::string, std::string>> domain_programs;

  /// How long a program may run before it gets SIGTERM; 10 ms .. 24 h.
  std::chrono::milliseconds timeout{60000};

  /// Per command type, for every domain (--exec-timeout TYPE=DUR).
  std::map<std::string, std::chrono::milliseconds> type_timeouts;

  /// Per domain and command type ([domains.NAME.types.TYPE] exec-timeout);
  /// wins over type_timeouts.
  std::map<std::string, std::map<std::string, std::chrono::milliseconds>>
    domain_type_timeouts;

  /// How long a program gets between SIGTERM and SIGKILL; 0 .. 10 min.
  std::chrono::milliseconds kill_grace{5000};

  /// Bytes kept of a program's standard output, and of its standard error;
  /// 1 KiB .. 64 MiB.
  int64_t max_output = 1 << 20;

  /// The environment variables a program gets from the worker's
  /// environment (when set there); nothing else is passed, so the DSN and
  /// passwords reach a program only when named here.
  std::vector<std::string> env{"PATH", "HOME", "LANG", "LC_ALL", "TZ"};
};

/// The programs of `domain` by command type: `programs`, overridden by the
/// domain's own.
std::map<std::string, std::string> exec_programs_of(const exec_config& cfg,
                                                    const std::string& domain);

/// The timeout of `type` in `domain`: the domain's own for the type, else
/// the type's, else `timeout`.
std::chrono::milliseconds exec_timeout_of(const exec_config& cfg,
                                          const std::string& domain,
                                          const std::string& type);

/// Splits a command line into its words, as a shell would without
/// expansions: words are separated by blanks; '...' keeps its text as is;
/// "..." keeps its text with \" \\ \$ and \` unescaped; a backslash outside
/// quotes keeps the next character. No variables, globs, pipes or
/// redirections (run `sh -c '...'` for those). Throws
/// std::invalid_argument for an empty command or an unclosed quote.
std::vector<std::string> split_command(std::string_view text);

/// Problems of `cfg` given the served `domains`, one sentence each (see
/// config::validate).
std::vector<std::string> validate_exec(const exec_config& cfg,
                                       const std::vector<std::string>& domains);

} // namespace cmdbus::config
