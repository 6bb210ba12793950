#pragma once

// The HTTP server's connections at the socket level (http_server.cpp decides
// what happens to them): a client connection as the front reads it and a
// thread answers it; writing to it without waiting, closing it without
// losing an answer just written, reading through its TLS session; and the
// request as cpp-httplib's router reads it (from memory) and answers it (to
// the socket, until a deadline). Internal to the library.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <string_view>

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <httplib.h>

#include "cmdbus/actors/ops/http_tls.hpp"

namespace cmdbus::http_conn {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// A client connection, owned by the front while it reads (or waits idle)
/// and by a queue or an answering thread once a whole request is in.
struct connection {
  int fd = -1;
  /// Bytes read and not yet answered: the request being read, or a whole
  /// one and whatever the client sent after it.
  std::string in;
  /// Where the search for the end of the head resumes.
  size_t scanned = 0;
  /// Size of the request at the front of `in` (head and body) once its
  /// head is read; 0 before.
  size_t request_size = 0;
  /// Its path is one of the reserved ones.
  bool reserved = false;
  /// The client closed its side (after what `in` holds).
  bool peer_done = false;
  /// Waiting for the next request on a keep-alive connection (nothing of
  /// it read yet).
  bool idle = false;
  /// Since when it reads (or waits idle): the oldest goes first.
  clock::time_point since;
  /// When it is closed if it has not sent a whole request (idle: any
  /// byte) by then.
  clock::time_point deadline;
  /// Requests answered.
  size_t served = 0;
  /// Set by the answering thread: close instead of reading on.
  bool close = false;
  /// With TLS: the connection's session (its handshake first).
  std::unique_ptr<http_tls::session> tls;
  /// The handshake waits for the socket to be writable.
  bool wants_write = false;
};

using conn_ptr = std::unique_ptr<connection>;
using conn_list = std::list<conn_ptr>;

/// Milliseconds from `now` to `t` for poll(), within [0, 1000].
int millis_until(clock::time_point t, clock::time_point now);

/// `s` in lower case (ASCII).
std::string lowercase(std::string_view s);

/// `s` without its leading and trailing spaces and tabs.
std::string_view trimmed(std::string_view s);

/// Writes `text` to `c` once, without waiting: what the socket's buffer
/// takes (a fresh one takes a short answer). With TLS, only once the
/// handshake has completed (before, nothing can be said).
void send_now(connection& c, std::string_view text);

/// Writes a short answer of the front's own, without waiting (a fresh
/// socket's buffer takes it; if not, the close says enough).
void send_answer(int fd, int status, bool json);

/// The same through `c` (with TLS: only once its handshake is done).
void send_answer(connection& c, int status, bool json);

/// Closes `fd` after reading what the client already sent (a close with
/// unread bytes would reset the connection and could lose an answer just
/// written).
void close_socket(int fd);

/// Closes `c`: with TLS, a close_notify first (when its session is
/// healthy), then the socket as above.
void close_connection(connection& c);

/// Reads what `c` sent (through its TLS session, if any): as recv(),
/// with errno EAGAIN for nothing now.
ssize_t read_some(connection& c, char* buf, size_t size);

/// The numeric host and port of `addr` (left unchanged if it has none).
void address_of(const sockaddr_storage& addr, socklen_t len, std::string& ip,
                int& port);

/// The request the front has read, as the router sees it: read from
/// memory (it never waits for the client), written to the socket until
/// the answer's deadline.
class request_stream final : public httplib::Stream {
public:
  request_stream(const connection& c, clock::time_point write_deadline)
    : fd_(c.fd), tls_(c.tls.get()), in_(c.in), size_(c.request_size),
      deadline_(write_deadline) {
    // nop
  }

  bool is_readable() const override {
    return pos_ < size_;
  }

  bool is_writable() const override {
    return wait_for(POLLOUT);
  }

  ssize_t read(char* ptr, size_t size) override {
    auto n = std::min(size, size_ - pos_);
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (tls_ != nullptr)
      return write_tls(ptr, size);
    size_t done = 0;
    while (done < size) {
      auto n = ::send(fd_, ptr + done, size - done,
                      MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
          && wait_for(POLLOUT))
        continue;
      return -1;
    }
    return static_cast<ssize_t>(size);
  }

  /// The same through the TLS session, which may also wait for the
  /// socket to be readable (a key update of the client's).
  ssize_t write_tls(const char* ptr, size_t size) {
    size_t done = 0;
    while (done < size) {
      http_tls::wants next;
      auto n = tls_->write(ptr + done, size - done, next);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (tls_->failed()
          || !wait_for(next == http_tls::wants::read ? POLLIN : POLLOUT))
        return -1;
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      address_of(addr, len, ip, port);
  }

  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      address_of(addr, len, ip, port);
  }

  int socket() const override {
    return fd_;
  }

  /// Bytes of the request the router read.
  size_t consumed() const noexcept {
    return pos_;
  }

private:
  /// Waits for `events` on the socket until the answer's deadline.
  bool wait_for(short events) const {
    for (;;) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline_
                                                           - clock::now())
                    .count();
      if (left <= 0)
        return false;
      pollfd p{fd_, events, 0};
      auto n = ::poll(&p, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR)
        continue;
      return n > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
    }
  }

  int fd_;
  http_tls::session* tls_;
  const std::string& in_;
  size_t size_;
  size_t pos_ = 0;
  clock::time_point deadline_;
};

} // namespace cmdbus::http_conn
