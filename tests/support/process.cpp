#include "tests/support/process.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace cmdbus::test {

namespace {

std::vector<std::string> merged_env(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    env.emplace_back(*e);
  for (auto& kv : overrides) {
    auto name = kv.substr(0, kv.find('=') + 1);
    for (auto i = env.begin(); i != env.end();)
      i = i->rfind(name, 0) == 0 ? env.erase(i) : i + 1;
    if (kv.size() > name.size())
      env.push_back(kv);
  }
  return env;
}

// In a sanitizer build (scripts/sanitize) a child process prints its reports
// to its stderr, which the caller may never show: a child that is expected
// to fail or that is killed on purpose would hide them. Any report there
// fails the calling test.
void fail_on_sanitizer_report(const std::string& program,
                              const std::string& err) {
  static constexpr const char* markers[] = {"ERROR: AddressSanitizer",
                                            "ERROR: LeakSanitizer",
                                            "WARNING: ThreadSanitizer",
                                            ": runtime error: "};
  for (const char* m : markers) {
    if (err.find(m) != std::string::npos) {
      ADD_FAILURE() << program << " printed a sanitizer report:\n" << err;
      return;
    }
  }
}

} // namespace

process_result run_process(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env_overrides,
                           const std::optional<std::string>& input) {
  int out_pipe[2];
  int err_pipe[2];
  int in_pipe[2] = {-1, -1};
  // Close-on-exec: the child gets them as 0, 1 and 2 only (dup2 clears the
  // flag). Otherwise it would keep the write ends under their own numbers
  // too, and so would whatever it leaves running (a server that pg_ctl
  // starts), or a child spawned meanwhile on another thread: the output
  // would never reach its end of file.
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0
      || (input && pipe2(in_pipe, O_CLOEXEC) != 0))
    throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (input) {
    posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
    posix_spawn_file_actions_addclose(&actions, in_pipe[1]);
  } else {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  auto env = merged_env(env_overrides);
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(),
                       envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (input)
    close(in_pipe[0]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (input)
      close(in_pipe[1]);
    throw std::runtime_error("cannot start " + argv[0] + ": "
                             + std::strerror(rc));
  }
  process_result res;
  // The input is written as the child reads it, alongside its output, so
  // that neither side waits for the other with a full pipe.
  size_t written = 0;
  if (input) {
    // A child that exits without reading all of it must not kill us.
    std::signal(SIGPIPE, SIG_IGN);
    fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  }
  pollfd fds[3] = {{out_pipe[0], POLLIN, 0},
                   {err_pipe[0], POLLIN, 0},
                   {input ? in_pipe[1] : -1, POLLOUT, 0}};
  std::string* sinks[2] = {&res.out, &res.err};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    if (fds[2].fd >= 0 && written == input->size()) {
      close(fds[2].fd);
      fds[2].fd = -1;
    }
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (fds[2].fd >= 0 && fds[2].revents != 0) {
      auto n = write(fds[2].fd, input->data() + written,
                     input->size() - written);
      if (n > 0) {
        written += static_cast<size_t>(n);
      } else if (errno != EAGAIN && errno != EINTR) {
        // The child closed its standard input: the rest is not read.
        close(fds[2].fd);
        fds[2].fd = -1;
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      auto n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    // retry
  }
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                    : 128 + WTERMSIG(status);
  fail_on_sanitizer_report(argv[0], res.err);
  return res;
}

process_result run_cmdbus(const std::vector<std::string>& args,
                          const std::vector<std::string>& env,
                          const std::optional<std::string>& input) {
  std::vector<std::string> argv{CMDBUS_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> overrides{"CMDBUS_DSN=",
                                     "CMDBUS_DSN_FILE=",
                                     "CMDBUS_POOLER=",
                                     "CMDBUS_CONFIG=",
                                     "CMDBUS_DOMAINS=",
                                     "CMDBUS_CONCURRENCY=",
                                     "CMDBUS_PREFETCH=",
                                     "CMDBUS_MAX_ATTEMPTS=",
                                     "CMDBUS_BACKOFF=",
                                     "CMDBUS_BACKOFF_JITTER=",
                                     "CMDBUS_VISIBILITY_TIMEOUT=",
                                     "CMDBUS_POLL_INTERVAL=",
                                     "CMDBUS_USE_NOTIFY=",
                                     "CMDBUS_STATEMENT_TIMEOUT=",
                                     "CMDBUS_SHUTDOWN_TIMEOUT=",
                                     "CMDBUS_FLUSH_INTERVAL=",
                                     "CMDBUS_FAULT_INJECT=",
                                     "PGHOST=",
                                     "PGPORT=",
                                     "PGUSER=",
                                     "PGPASSWORD=",
                                     "PGDATABASE="};
  overrides.insert(overrides.end(), env.begin(), env.end());
  return run_process(argv, overrides, input);
}

bool crashed(const process_result& r) {
  return r.exit_code >= 128
         || r.err.find("terminate called") != std::string::npos
         || r.err.find("Aborted") != std::string::npos;
}

size_t line_count(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of('\n');
  if (end == std::string::npos)
    return {};
  auto start = text.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return text.substr(start, end + 1 - start);
}

char process_state(int pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat;
  if (!std::getline(in, stat))
    return 0;
  // "pid (comm) state ...": the state follows the name's last ')'.
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size())
    return 0;
  return stat[close + 2];
}

std::optional<double> cpu_seconds(int pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat{std::istreambuf_iterator<char>{in},
                   std::istreambuf_iterator<char>{}};
  // "pid (comm) state ppid ...": the name may hold spaces and parentheses,
  // the fields after its closing parenthesis do not. utime and stime are
  // the 14th and 15th fields, the 12th and 13th after the name.
  auto close = stat.rfind(')');
  if (close == std::string::npos)
    return std::nullopt;
  std::istringstream fields{stat.substr(close + 1)};
  std::string skip;
  for (int i = 0; i < 11; ++i)
    fields >> skip;
  long long utime = 0;
  long long stime = 0;
  if (!(fields >> utime >> stime))
    return std::nullopt;
  auto ticks = sysconf(_SC_CLK_TCK);
  if (ticks <= 0)
    return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(ticks);
}

} // namespace cmdbus::test
