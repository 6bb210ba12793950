#include "bench/chaos/process.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace cmdbus::chaos {

namespace {

std::atomic<bool> interrupt_flag{false};

extern "C" void on_signal(int) {
  interrupt_flag.store(true);
}

int decode_status(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return -1;
}

// Everything the child needs, built before fork: after fork only
// async-signal-safe calls may run (other threads may hold the allocator's
// locks).
struct prepared {
  std::vector<std::string> env_strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string log_path;
  std::string exec_failed;
  bool discard_stdout = false;
};

void build(const process_spec& spec, prepared& p) {
  for (char** e = environ; *e != nullptr; ++e)
    if (spec.keep_cmdbus_env || std::strncmp(*e, "CMDBUS_", 7) != 0)
      p.env_strings.emplace_back(*e);
  for (auto& e : spec.env)
    p.env_strings.push_back(e);
  for (auto& a : spec.argv)
    p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (auto& e : p.env_strings)
    p.envp.push_back(const_cast<char*>(e.c_str()));
  p.envp.push_back(nullptr);
  p.log_path = spec.log_path.empty() ? "/dev/null" : spec.log_path;
  p.discard_stdout = spec.discard_stdout;
  p.exec_failed = "chaos: cannot execute " + spec.argv.front() + "\n";
}

[[noreturn]] void run_child(const prepared& p, bool die_with_parent,
                            pid_t parent) {
  setpgid(0, 0);
  if (die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(126);
  }
  // The harness ignores SIGPIPE, which exec keeps; its own handlers are
  // reset by exec anyway.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int in = open("/dev/null", O_RDONLY);
  int out = open(p.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (in < 0 || out < 0)
    _exit(125);
  dup2(in, 0);
  dup2(p.discard_stdout ? open("/dev/null", O_WRONLY) : out, 1);
  dup2(out, 2);
  execve(p.argv[0], p.argv.data(), p.envp.data());
  auto n = write(2, p.exec_failed.data(), p.exec_failed.size());
  (void) n;
  _exit(127);
}

} // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

bool interrupted() noexcept {
  return interrupt_flag.load();
}

void check_interrupted() {
  if (interrupted())
    throw interrupted_error{};
}

void pause_until(clock::time_point t) {
  for (;;) {
    check_interrupted();
    auto now = clock::now();
    if (now >= t)
      return;
    std::this_thread::sleep_for(
      std::min<clock::duration>(t - now, std::chrono::milliseconds{50}));
  }
}

void pause_for(std::chrono::milliseconds d) {
  pause_until(clock::now() + d);
}

child::child(child&& other) noexcept
  : pid_(other.pid_), exit_code_(other.exit_code_) {
  other.pid_ = -1;
}

child& child::operator=(child&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !exit_code_)
      kill_now();
    pid_ = other.pid_;
    exit_code_ = other.exit_code_;
    other.pid_ = -1;
  }
  return *this;
}

child::~child() {
  if (pid_ > 0 && !exit_code_)
    kill_now();
}

child child::start(const process_spec& spec) {
  if (spec.argv.empty())
    throw std::runtime_error("chaos: nothing to start");
  prepared p;
  build(spec, p);
  auto parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error(std::string{"chaos: fork failed: "}
                             + std::strerror(errno));
  if (pid == 0)
    run_child(p, spec.die_with_parent, parent);
  // Also here, so that a signal to the group right after start finds it.
  setpgid(pid, pid);
  child c;
  c.pid_ = pid;
  return c;
}

bool child::try_reap() {
  if (pid_ <= 0 || exit_code_)
    return true;
  int status = 0;
  auto r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = decode_status(status);
    return true;
  }
  if (r < 0 && errno == ECHILD) {
    exit_code_ = -1;
    return true;
  }
  return false;
}

bool child::running() {
  return !try_reap();
}

void child::signal(int sig, bool whole_group) const {
  if (pid_ <= 0 || exit_code_)
    return;
  if (whole_group)
    ::kill(-pid_, sig);
  else
    ::kill(pid_, sig);
}

std::optional<int> child::wait_for(std::chrono::milliseconds timeout) {
  auto until = clock::now() + timeout;
  for (;;) {
    if (try_reap())
      return exit_code_;
    if (clock::now() >= until)
      return std::nullopt;
    check_interrupted();
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
}

int child::kill_now() {
  if (pid_ <= 0)
    return -1;
  if (!exit_code_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int status = 0;
    pid_t r;
    do {
      r = waitpid(pid_, &status, 0);
    } while (r < 0 && errno == EINTR);
    exit_code_ = r == pid_ ? decode_status(status) : -1;
  } else {
    // Reaped already; its forked children may still run in its group.
    ::kill(-pid_, SIGKILL);
  }
  return *exit_code_;
}

int run_to_end(const process_spec& spec, std::chrono::milliseconds timeout) {
  auto c = child::start(spec);
  if (auto code = c.wait_for(timeout))
    return *code;
  return c.kill_now();
}

std::string tail_of(const std::string& path, int lines) {
  std::ifstream in{path};
  if (!in)
    return {};
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines)
      last.pop_front();
  }
  std::string out;
  for (auto& l : last)
    out += l + "\n";
  return out;
}

} // namespace cmdbus::chaos
