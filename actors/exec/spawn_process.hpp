#pragma once

// Running one external program to its end: its input on standard input,
// its standard output and error collected (up to a limit each), a deadline
// enforced with SIGTERM and then SIGKILL. Plain POSIX (posix_spawn, pipes,
// poll and a pidfd), no CAF: the caller's thread waits, so it must be a
// thread that may block (a blocking handler's own thread, never one of the
// actor scheduler's).

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cmdbus::exec {

/// The bounds of one program run.
struct program_limits {
  /// How long the program may run before it gets SIGTERM; > 0.
  std::chrono::milliseconds timeout{60000};
  /// How long after SIGTERM it gets SIGKILL; >= 0.
  std::chrono::milliseconds kill_grace{5000};
  /// Bytes kept of standard output, and of standard error; what follows is
  /// read and dropped (the program never blocks on a full pipe).
  size_t max_output = 1 << 20;
};

/// How a program run ended.
enum class program_end {
  /// It exited on its own (exit_status).
  exited,
  /// A signal ended it that the runner did not send (signal).
  signaled,
  /// It outlived its timeout and was terminated (signal: the one that
  /// ended it, or 0 when it exited on its own after SIGTERM).
  timed_out,
  /// The caller's cancel flag was set and the program was terminated like
  /// at a timeout.
  cancelled,
  /// It could not be started (spawn_error, e.g. ENOENT or EACCES).
  not_started,
};

/// Returns "exited", "signaled", "timed out", "cancelled" or "not started".
const char* to_string(program_end x) noexcept;

/// What one program run gave.
struct program_result {
  program_end end = program_end::not_started;
  /// The exit status when it exited (also after a timeout's SIGTERM).
  int exit_status = -1;
  /// The signal that ended it, or 0.
  int signal = 0;
  /// The errno of a failed start.
  int spawn_error = 0;
  /// Standard output and error, each at most max_output bytes.
  std::string out;
  std::string err;
  /// Whether standard output (standard error) went beyond max_output.
  bool out_cut = false;
  bool err_cut = false;
};

/// Runs `argv` (argv[0] is a path, or a name looked up in the PATH of this
/// process) with exactly the environment `env` ("NAME=value" each) in a
/// process group of its own, with `input` on its standard input (then end
/// of file), and waits for it. The child gets the three pipes as its
/// descriptors 0, 1 and 2 and no other descriptor of this process, default
/// signal dispositions and an empty signal mask. At the timeout its process
/// group gets SIGTERM, after kill_grace SIGKILL; `cancelled`, when given and
/// true (it is asked every 100 ms), ends it the same way. The child is always
/// reaped and every pipe closed before this returns; a program that does not
/// read its input is not an error. Never throws for the program's failures (see
/// program_result); throws std::system_error when the pipes cannot be made.
program_result run_program(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env,
                           std::string_view input, const program_limits& limits,
                           const std::function<bool()>& cancelled = {});

} // namespace cmdbus::exec
