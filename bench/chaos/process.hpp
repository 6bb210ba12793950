#pragma once

// Child processes of the fault harness (workers, the TCP proxy, scripts/pg)
// and its interruption by SIGINT/SIGTERM.
//
// Every child runs in a process group of its own, so that one signal
// reaches it and whatever it forked (socat's per-connection children).
// Long-running children also get SIGKILL from the kernel when the thread
// that started them ends (PR_SET_PDEATHSIG): start them from the main
// thread, and nothing outlives the harness, even a harness killed with -9.

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/types.h>

namespace cmdbus::chaos {

using clock = std::chrono::steady_clock;

// -- interruption
// --------------------------------------------------------------

/// Makes SIGINT and SIGTERM set the interruption flag (and ignores SIGPIPE).
void install_signal_handlers();

/// Returns whether SIGINT or SIGTERM arrived.
bool interrupted() noexcept;

/// Thrown by the harness's waits once interrupted; unwinding stops what it
/// started.
class interrupted_error : public std::runtime_error {
public:
  interrupted_error() : std::runtime_error("interrupted by a signal") {
    // nop
  }
};

/// Throws `interrupted_error` when interrupted.
void check_interrupted();

/// Sleeps until `t` in short slices (pacing, fault durations), throwing
/// `interrupted_error` when interrupted meanwhile.
void pause_until(clock::time_point t);

/// pause_until(now + d).
void pause_for(std::chrono::milliseconds d);

// -- child processes
// -----------------------------------------------------------

/// What to run.
struct process_spec {
  /// argv[0] is a path (no PATH lookup).
  std::vector<std::string> argv;
  /// Environment: the harness's own minus its CMDBUS_* variables (unless
  /// `keep_cmdbus_env`), plus these "NAME=value" entries.
  std::vector<std::string> env;
  bool keep_cmdbus_env = false;
  /// stdout and stderr are appended here; "" sends them to /dev/null.
  std::string log_path;
  /// Sends stdout to /dev/null instead (only stderr goes to the log).
  bool discard_stdout = false;
  /// Whether the kernel kills the child when the starting thread ends.
  bool die_with_parent = true;
};

/// A started child process; killed (its whole group, SIGKILL) and reaped on
/// destruction unless it was reaped before. Move-only.
class child {
public:
  child() = default;
  child(child&& other) noexcept;
  child& operator=(child&& other) noexcept;
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child();

  /// Starts `spec`; throws std::runtime_error when fork fails (an exec
  /// failure shows as exit code 127 and a line in the log).
  static child start(const process_spec& spec);

  /// Returns the process id (-1 when empty).
  pid_t pid() const noexcept {
    return pid_;
  }

  /// Returns whether the child still runs (reaps it when it ended).
  bool running();

  /// Sends `sig` to the child, or to its whole process group.
  void signal(int sig, bool whole_group = false) const;

  /// Waits until the child exits or `timeout` passes (checking for
  /// interruption); returns its exit code (128 + signal when killed by one)
  /// or nothing at the timeout.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);

  /// Kills the whole group with SIGKILL and reaps the child; returns its
  /// exit code.
  int kill_now();

  /// The exit code once reaped.
  std::optional<int> exit_code() const noexcept {
    return exit_code_;
  }

private:
  bool try_reap();
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

/// Runs `spec` to its end, at most `timeout` (then killed); returns its exit
/// code.
int run_to_end(const process_spec& spec, std::chrono::milliseconds timeout);

/// Returns the last `lines` lines of the file at `path` ("" when unreadable).
std::string tail_of(const std::string& path, int lines);

} // namespace cmdbus::chaos
