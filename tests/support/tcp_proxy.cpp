#include "tests/support/tcp_proxy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cmdbus::test {

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

bool accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return false;
  auto addr = loopback(port);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

} // namespace

tcp_proxy::tcp_proxy(int target_port)
  : port_(free_port()), target_port_(target_port) {
  start();
}

void tcp_proxy::restore() {
  if (pid_ <= 0)
    start();
}

void tcp_proxy::start() {
  auto target_port = target_port_;
  std::vector<std::string> args{
    "/usr/bin/socat",
    "TCP-LISTEN:" + std::to_string(port_) + ",fork,reuseaddr,bind=127.0.0.1",
    "TCP:127.0.0.1:" + std::to_string(target_port)};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A process group of its own: cut() kills the forked children too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  int rc = posix_spawn(&pid_, argv[0], nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    throw std::runtime_error("tcp_proxy: cannot start /usr/bin/socat");
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (!accepts(port_)) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("tcp_proxy: socat exited at once");
    }
    if (std::chrono::steady_clock::now() >= until) {
      cut();
      throw std::runtime_error("tcp_proxy: socat does not accept connections");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
}

tcp_proxy::~tcp_proxy() {
  cut();
}

void tcp_proxy::freeze() {
  if (pid_ > 0)
    ::kill(-pid_, SIGSTOP);
}

void tcp_proxy::cut() {
  if (pid_ <= 0)
    return;
  ::kill(-pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

} // namespace cmdbus::test
