#pragma once

// Command line of cmdbus-chaos.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace cmdbus::chaos {

/// Everything the harness is told.
struct options {
  /// restart, kill, proxy, stall, nodes, in this order for `all`.
  std::vector<std::string> scenarios;
  int commands = 3000;
  /// DemoOrder processes per scenario, in a domain of their own (0: none).
  int processes = 60;
  /// Sending time per scenario; 0 = max(20, commands / 250).
  int seconds = 0;
  int workers = 3;
  int restarts = 1;
  int kill_cycles = 5;
  /// Handler nodes of the nodes scenario, and how long a killed one stays
  /// down before it is started again.
  int nodes = 2;
  int node_down_ms = 1000;
  int cuts = 2;
  int cut_ms = 1000;
  int stalls = 1;
  int stall_seconds = 10;
  int settle_seconds = 30;
  int give_up_seconds = 60;
  int batch_size = 20;
  int min_ms = 20;
  int max_ms = 100;
  uint64_t seed = 1;
  int proxy_port = 0;
  std::string dsn;
  std::string cmdbus;
  /// The worker of the nodes scenario (cmdbus-chaos-worker).
  std::string node_worker;
  std::string pg_script;
  std::string socat;
  std::string log_dir;
  bool keep_logs = false;
  bool json = false;
  bool help = false;

  /// The sending time in effect.
  int load_seconds() const;
};

/// A command-line mistake; main prints it with a pointer to --help.
class usage_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Parses the arguments (`--opt value` or `--opt=value`). The DSN comes
/// from --dsn, else CMDBUS_DSN; the programs default to the ones of this
/// build. Throws usage_error.
options parse_options(int argc, char** argv);

/// The --help text.
const char* help_text();

} // namespace cmdbus::chaos
