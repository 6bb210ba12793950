#pragma once

// A `cmdbus` child process that runs in the background (a `cmdbus worker`
// without --tick), for the tests that drive processes through the binary:
// started on its own thread through run_process, stopped with SIGTERM, or
// left to die by itself (fault injection). Its pid comes from a file the
// shell writes before it execs the binary.

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

namespace cmdbus::test {

class background_cmdbus {
public:
  /// Starts `cmdbus <args...>` (or `binary <args...>`, another program
  /// that takes the worker's settings) with `env` ("NAME=value") on top of
  /// the current environment without its cmdbus settings.
  explicit background_cmdbus(const std::vector<std::string>& args,
                             const std::vector<std::string>& env = {},
                             const std::string& binary = CMDBUS_BINARY)
    : pid_file_((std::filesystem::temp_directory_path()
                 / (unique_name("cmdbus_pid") + ".pid"))
                  .string()) {
    std::vector<std::string> argv{
      "/bin/sh", "-c", "echo $$ > '" + pid_file_ + "' && exec \"$0\" \"$@\"",
      binary};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> overrides{
      "CMDBUS_DSN=", "CMDBUS_DSN_FILE=", "CMDBUS_CONFIG=", "CMDBUS_DOMAINS=",
      "CMDBUS_FAULT_INJECT="};
    overrides.insert(overrides.end(), env.begin(), env.end());
    result_ = std::async(std::launch::async, [argv, overrides] {
      return run_process(argv, overrides);
    });
  }

  background_cmdbus(const background_cmdbus&) = delete;
  background_cmdbus& operator=(const background_cmdbus&) = delete;

  /// Kills the child if it still runs.
  ~background_cmdbus() {
    if (result_.valid()) {
      signal(SIGKILL);
      result_.wait();
    }
    std::error_code ec;
    std::filesystem::remove(pid_file_, ec);
  }

  /// Waits up to `deadline` for the child to exit by itself; returns its
  /// result, or none when it still runs.
  std::optional<process_result> wait(std::chrono::milliseconds deadline) {
    if (result_.wait_for(deadline) != std::future_status::ready)
      return std::nullopt;
    return result_.get();
  }

  /// Sends SIGTERM and waits up to `deadline` for the exit.
  std::optional<process_result>
  stop(std::chrono::milliseconds deadline = std::chrono::seconds{30}) {
    signal(SIGTERM);
    return wait(deadline);
  }

  /// The child's process id (waits up to 10 s for its pid file); 0 when
  /// not known.
  pid_t pid() const {
    pid_t pid = 0;
    eventually(
      [&] {
        std::ifstream in{pid_file_};
        return static_cast<bool>(in >> pid) && pid > 0;
      },
      std::chrono::seconds{10});
    return pid;
  }

  /// Whether the child is stopped (SIGSTOP took effect: state T in
  /// /proc/<pid>/stat); false when it runs, exited or is not known.
  bool stopped() const {
    auto p = pid();
    return p > 0 && process_state(p) == 'T';
  }

  /// Sends `sig` to the child while it runs (SIGSTOP / SIGCONT to freeze
  /// it and let it go on).
  void signal(int sig) {
    if (result_.wait_for(std::chrono::seconds{0}) == std::future_status::ready)
      return;
    if (auto p = pid(); p > 0)
      ::kill(p, sig);
  }

private:
  std::string pid_file_;
  std::future<process_result> result_;
};

} // namespace cmdbus::test
