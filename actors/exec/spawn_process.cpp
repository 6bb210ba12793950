#include "cmdbus/actors/exec/spawn_process.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <system_error>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace cmdbus::exec {

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// A descriptor closed when it goes out of scope.
class fd_holder {
public:
  fd_holder() = default;
  explicit fd_holder(int fd) : fd_(fd) {
    // nop
  }
  fd_holder(const fd_holder&) = delete;
  fd_holder& operator=(const fd_holder&) = delete;
  ~fd_holder() {
    reset();
  }
  int release() noexcept {
    auto fd = fd_;
    fd_ = -1;
    return fd;
  }
  int get() const noexcept {
    return fd_;
  }
  bool open() const noexcept {
    return fd_ >= 0;
  }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = fd;
  }

private:
  int fd_ = -1;
};

/// A pipe: [0] the read end, [1] the write end; both close-on-exec.
struct pipe_pair {
  fd_holder end[2];

  pipe_pair() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::system_error(errno, std::generic_category(),
                              "cannot make a pipe for a program");
    end[0].reset(fds[0]);
    end[1].reset(fds[1]);
  }
};

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0)
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/// Blocks SIGPIPE in this thread while it lives, so that a write to a
/// program that closed its input fails with EPIPE instead of ending this
/// process; a SIGPIPE raised meanwhile is taken before the mask returns.
class sigpipe_guard {
public:
  sigpipe_guard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;
  ~sigpipe_guard() {
    if (raised_) {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE)
        ; // taken
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  void raised() noexcept {
    raised_ = true;
  }

private:
  sigset_t pipe_;
  sigset_t old_;
  bool raised_ = false;
};

/// The spawn attributes: a process group of its own, an empty signal mask
/// (the worker's threads block SIGINT and SIGTERM) and every signal at its
/// default action (SIGPIPE may be ignored here).
class spawn_attributes {
public:
  spawn_attributes() {
    posix_spawnattr_init(&attr_);
    sigset_t none;
    sigemptyset(&none);
    sigset_t all;
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&attr_, &none);
    posix_spawnattr_setsigdefault(&attr_, &all);
    posix_spawnattr_setpgroup(&attr_, 0);
    posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETPGROUP
                                       | POSIX_SPAWN_SETSIGMASK
                                       | POSIX_SPAWN_SETSIGDEF);
  }
  spawn_attributes(const spawn_attributes&) = delete;
  spawn_attributes& operator=(const spawn_attributes&) = delete;
  ~spawn_attributes() {
    posix_spawnattr_destroy(&attr_);
  }
  const posix_spawnattr_t* get() const noexcept {
    return &attr_;
  }

private:
  posix_spawnattr_t attr_;
};

/// The file actions: the pipes' child ends become 0, 1 and 2, and every
/// other descriptor is closed (also those that another thread opened
/// without close-on-exec).
class file_actions {
public:
  file_actions(int in, int out, int err) {
    posix_spawn_file_actions_init(&fa_);
    posix_spawn_file_actions_adddup2(&fa_, in, 0);
    posix_spawn_file_actions_adddup2(&fa_, out, 1);
    posix_spawn_file_actions_adddup2(&fa_, err, 2);
    posix_spawn_file_actions_addclosefrom_np(&fa_, 3);
  }
  file_actions(const file_actions&) = delete;
  file_actions& operator=(const file_actions&) = delete;
  ~file_actions() {
    posix_spawn_file_actions_destroy(&fa_);
  }
  const posix_spawn_file_actions_t* get() const noexcept {
    return &fa_;
  }

private:
  posix_spawn_file_actions_t fa_;
};

std::vector<char*> c_strings(const std::vector<std::string>& xs) {
  std::vector<char*> out;
  out.reserve(xs.size() + 1);
  for (auto& x : xs)
    out.push_back(const_cast<char*>(x.c_str()));
  out.push_back(nullptr);
  return out;
}

/// Sends `sig` to the program's process group, or to the program alone
/// when it left its group.
void signal_program(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0)
    ::kill(pid, sig);
}

/// One output pipe being read into its buffer.
struct output {
  fd_holder fd;
  std::string* text;
  bool* cut;

  /// Reads what is there; returns false at end of file or on an error
  /// (the pipe is then closed).
  bool read_some(size_t max) {
    char buf[16384];
    for (;;) {
      auto n = ::read(fd.get(), buf, sizeof buf);
      if (n > 0) {
        auto room = max > text->size() ? max - text->size() : size_t{0};
        auto keep = std::min(room, static_cast<size_t>(n));
        text->append(buf, keep);
        if (keep < static_cast<size_t>(n))
          *cut = true;
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return true;
      fd.reset();
      return false;
    }
  }
};

} // namespace

const char* to_string(program_end x) noexcept {
  switch (x) {
    case program_end::exited: return "exited";
    case program_end::signaled: return "signaled";
    case program_end::timed_out: return "timed out";
    case program_end::cancelled: return "cancelled";
    case program_end::not_started: return "not started";
  }
  return "?";
}

program_result run_program(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env,
                           std::string_view input, const program_limits& limits,
                           const std::function<bool()>& cancelled) {
  program_result r;
  if (argv.empty() || argv.front().empty()) {
    r.spawn_error = ENOENT;
    return r;
  }
  pipe_pair in;
  pipe_pair out;
  pipe_pair err;
  pid_t pid = -1;
  {
    file_actions actions{in.end[0].get(), out.end[1].get(), err.end[1].get()};
    spawn_attributes attributes;
    auto args = c_strings(argv);
    auto envp = c_strings(env);
    bool has_slash = argv.front().find('/') != std::string::npos;
    int rc = has_slash
               ? ::posix_spawn(&pid, args[0], actions.get(), attributes.get(),
                               args.data(), envp.data())
               : ::posix_spawnp(&pid, args[0], actions.get(), attributes.get(),
                                args.data(), envp.data());
    if (rc != 0) {
      r.spawn_error = rc;
      return r;
    }
  }
  // The child's ends belong to the child alone.
  in.end[0].reset();
  out.end[1].reset();
  err.end[1].reset();
  fd_holder to_child{in.end[1].release()};
  output outs[2] = {{fd_holder{out.end[0].release()}, &r.out, &r.out_cut},
                    {fd_holder{err.end[0].release()}, &r.err, &r.err_cut}};
  set_nonblocking(to_child.get());
  set_nonblocking(outs[0].fd.get());
  set_nonblocking(outs[1].fd.get());
  // A pidfd tells when the program ends even while something it started
  // keeps its pipes open; without one (old kernels) the exit is polled.
  fd_holder pidfd{static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))};
  sigpipe_guard no_sigpipe;
  size_t written = 0;
  if (input.empty())
    to_child.reset();
  auto now = clock::now();
  auto deadline = now + limits.timeout;
  // running -> terminating (SIGTERM sent) -> killed (SIGKILL sent).
  enum class phase { running, terminating, killed } stage = phase::running;
  program_end ending = program_end::exited;
  int wait_status = 0;
  bool lost_status = false;
  auto terminate = [&](program_end why) {
    ending = why;
    signal_program(pid, SIGTERM);
    stage = phase::terminating;
    deadline = clock::now() + limits.kill_grace;
  };
  for (;;) {
    pollfd fds[4];
    nfds_t n = 0;
    int in_at = -1, out_at[2] = {-1, -1}, pid_at = -1;
    if (to_child.open()) {
      in_at = static_cast<int>(n);
      fds[n++] = {to_child.get(), POLLOUT, 0};
    }
    for (int i = 0; i < 2; ++i)
      if (outs[i].fd.open()) {
        out_at[i] = static_cast<int>(n);
        fds[n++] = {outs[i].fd.get(), POLLIN, 0};
      }
    if (pidfd.open()) {
      pid_at = static_cast<int>(n);
      fds[n++] = {pidfd.get(), POLLIN, 0};
    }
    now = clock::now();
    auto wait = stage == phase::killed
                  ? milliseconds{100}
                  : std::chrono::ceil<milliseconds>(
                    std::max(deadline - now, clock::duration::zero()));
    // The cancel flag, and the exit without a pidfd, are looked at
    // between waits.
    if (cancelled)
      wait = std::min(wait, milliseconds{100});
    if (!pidfd.open())
      wait = std::min(wait, milliseconds{10});
    int ready = ::poll(fds, n, static_cast<int>(wait.count()));
    if (ready < 0 && errno != EINTR) {
      // Not expected: end it for sure and reap it.
      signal_program(pid, SIGKILL);
      while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR)
        ; // again
      break;
    }
    if (ready > 0) {
      if (in_at >= 0 && fds[in_at].revents != 0) {
        for (;;) {
          auto w = ::write(to_child.get(), input.data() + written,
                           input.size() - written);
          if (w > 0) {
            written += static_cast<size_t>(w);
            if (written == input.size()) {
              to_child.reset();
              break;
            }
            continue;
          }
          if (w < 0 && errno == EINTR)
            continue;
          if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
          // EPIPE: the program does not read (all of) its input.
          if (w < 0 && errno == EPIPE)
            no_sigpipe.raised();
          to_child.reset();
          break;
        }
      }
      for (int i = 0; i < 2; ++i)
        if (out_at[i] >= 0 && fds[out_at[i]].revents != 0)
          outs[i].read_some(limits.max_output);
    }
    if (!pidfd.open() || (pid_at >= 0 && fds[pid_at].revents != 0)) {
      pid_t w;
      do
        w = ::waitpid(pid, &wait_status, WNOHANG);
      while (w < 0 && errno == EINTR);
      if (w == pid)
        break;
      if (w < 0) {
        // ECHILD: reaped elsewhere (SIGCHLD ignored); the status is lost.
        lost_status = true;
        break;
      }
    }
    now = clock::now();
    if (stage == phase::running && cancelled && cancelled())
      terminate(program_end::cancelled);
    else if (stage == phase::running && now >= deadline)
      terminate(program_end::timed_out);
    else if (stage == phase::terminating && now >= deadline) {
      signal_program(pid, SIGKILL);
      stage = phase::killed;
    }
  }
  // What it wrote before it ended is still in the pipes; what is written
  // later (by something it left running) is not waited for.
  for (auto& o : outs)
    if (o.fd.open()) {
      o.read_some(limits.max_output);
      o.fd.reset();
    }
  r.end = ending;
  if (lost_status) {
    r.exit_status = -1;
  } else if (WIFEXITED(wait_status)) {
    r.exit_status = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    r.signal = WTERMSIG(wait_status);
    if (ending == program_end::exited)
      r.end = program_end::signaled;
  }
  return r;
}

} // namespace cmdbus::exec
