#include "tests/support/http_clients.hpp"

#include <cerrno>
#include <filesystem>

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace cmdbus::test {

namespace {

using clock = std::chrono::steady_clock;

bool starts_with_status_line(const std::string& text) {
  return text.rfind("HTTP/1.", 0) == 0;
}

} // namespace

int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::optional<std::string> await_close(int fd,
                                       std::chrono::milliseconds deadline) {
  auto until = clock::now() + deadline;
  std::string got;
  char buf[4096];
  for (;;) {
    // At least one look, even with no time left.
    auto left = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(until
                                                               - clock::now())
           .count());
    pollfd p{fd, POLLIN, 0};
    auto n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return std::nullopt;
    auto r = ::recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0 || got.size() >= 65536)
      return got;
    got.append(buf, static_cast<size_t>(r));
  }
}

int open_descriptors(pid_t pid) {
  std::error_code ec;
  std::filesystem::directory_iterator it{"/proc/" + std::to_string(pid) + "/fd",
                                         ec};
  if (ec)
    return -1;
  int n = 0;
  for (; it != std::filesystem::directory_iterator{}; it.increment(ec)) {
    if (ec)
      return -1;
    ++n;
  }
  return n;
}

hanging_clients::hanging_clients(int port, size_t count, std::string prefix,
                                 std::chrono::milliseconds reopen_after)
  : port_(port), prefix_(std::move(prefix)), reopen_after_(reopen_after) {
  thread_ = std::thread{[this, count] { run(count); }};
}

hanging_clients::~hanging_clients() {
  stop_ = true;
  thread_.join();
}

void hanging_clients::run(size_t count) {
  struct slot {
    int fd = -1;
    clock::time_point reopen_at;
    std::string got;
  };
  std::vector<slot> slots(count);
  std::vector<pollfd> fds;
  std::vector<size_t> which;
  char buf[4096];
  while (!stop_) {
    auto now = clock::now();
    for (auto& s : slots) {
      if (s.fd >= 0 || now < s.reopen_at || stop_)
        continue;
      s.fd = connect_loopback(port_);
      if (s.fd < 0) {
        s.reopen_at = now + reopen_after_;
        continue;
      }
      ++opened_;
      if (!prefix_.empty())
        ::send(s.fd, prefix_.data(), prefix_.size(), MSG_NOSIGNAL);
      s.got.clear();
    }
    fds.clear();
    which.clear();
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].fd >= 0) {
        fds.push_back({slots[i].fd, POLLIN, 0});
        which.push_back(i);
      }
    auto n = ::poll(fds.data(), fds.size(), 50);
    if (n <= 0)
      continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0)
        continue;
      auto& s = slots[which[k]];
      auto r = ::recv(s.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        if (s.got.size() < 4096)
          s.got.append(buf, static_cast<size_t>(r));
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EINTR))
        continue;
      ++closed_;
      if (starts_with_status_line(s.got))
        ++answered_;
      ::close(s.fd);
      s.fd = -1;
      s.reopen_at = clock::now() + reopen_after_;
    }
  }
  for (auto& s : slots)
    if (s.fd >= 0)
      ::close(s.fd);
}

request_flood::request_flood(int port, size_t threads,
                             std::vector<std::string> paths)
  : port_(port), paths_(std::move(paths)) {
  for (size_t t = 0; t < threads; ++t)
    threads_.emplace_back([this, t] {
      httplib::Client client{"127.0.0.1", port_};
      client.set_keep_alive(true);
      client.set_connection_timeout(std::chrono::seconds{2});
      client.set_read_timeout(std::chrono::seconds{2});
      client.set_write_timeout(std::chrono::seconds{2});
      for (size_t i = t; !stop_; ++i) {
        auto began = clock::now();
        auto res = client.Get(paths_[i % paths_.size()]);
        int status = res ? res->status : 0;
        // No answer: a close, or nothing until the client gave up.
        if (!res && clock::now() - began >= std::chrono::milliseconds{1900})
          status = -1;
        std::lock_guard<std::mutex> guard{mtx_};
        ++statuses_[status];
      }
    });
}

request_flood::~request_flood() {
  stop();
}

void request_flood::stop() {
  stop_ = true;
  for (auto& t : threads_)
    if (t.joinable())
      t.join();
}

std::map<int, size_t> request_flood::statuses() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return statuses_;
}

} // namespace cmdbus::test
