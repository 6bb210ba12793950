#pragma once

// Clients that misbehave towards an HTTP listener on 127.0.0.1, for the
// tests of its limits: connections that send part of a request (or
// nothing) and wait, reopened whenever the server closes them, and a flood
// of requests from many threads. Bounded: a fixed number of connections
// or threads, until the object is destroyed.

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace cmdbus::test {

/// Connects a blocking TCP socket to 127.0.0.1:port (1 s to connect);
/// returns -1 when it cannot.
int connect_loopback(int port);

/// Waits up to `deadline` for the server to close connection `fd`: returns
/// what it sent before closing ("" for a close without an answer), or
/// nothing when the connection is still open at the deadline. Reads at
/// most 64 KiB.
std::optional<std::string> await_close(int fd,
                                       std::chrono::milliseconds deadline);

/// The open file descriptors of process `pid` (/proc/PID/fd); -1 when
/// the process is gone.
int open_descriptors(pid_t pid);

/// `count` connections that send `prefix` (e.g. half a request line, or
/// nothing) and then wait. A connection the server closes is counted and
/// opened again after `reopen_after` (a client that insists), so that
/// `count` of them stay connected while the object lives.
class hanging_clients {
public:
  hanging_clients(int port, size_t count, std::string prefix,
                  std::chrono::milliseconds reopen_after
                  = std::chrono::milliseconds{200});
  /// Closes every connection.
  ~hanging_clients();
  hanging_clients(const hanging_clients&) = delete;
  hanging_clients& operator=(const hanging_clients&) = delete;

  /// Connections the server has closed so far.
  size_t closed_by_server() const noexcept {
    return closed_.load();
  }
  /// Of those, the ones that got an HTTP status line before the close.
  size_t answered() const noexcept {
    return answered_.load();
  }
  /// Connections opened so far (the first `count` and every reopening).
  size_t opened() const noexcept {
    return opened_.load();
  }

private:
  void run(size_t count);

  int port_;
  std::string prefix_;
  std::chrono::milliseconds reopen_after_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> closed_{0};
  std::atomic<size_t> answered_{0};
  std::atomic<size_t> opened_{0};
  std::thread thread_;
};

/// `threads` clients that GET `paths` in turn as fast as they are answered
/// (each on a keep-alive connection of its own, 2 s timeouts), until the
/// object is destroyed.
class request_flood {
public:
  request_flood(int port, size_t threads, std::vector<std::string> paths);
  /// Stops the clients and waits for them.
  ~request_flood();
  request_flood(const request_flood&) = delete;
  request_flood& operator=(const request_flood&) = delete;

  /// Stops the clients and waits for them (idempotent).
  void stop();

  /// Requests so far by status; 0 counts those whose connection was
  /// closed without an answer, -1 those that got nothing until the
  /// client's timeouts (a hang).
  std::map<int, size_t> statuses() const;

private:
  int port_;
  std::vector<std::string> paths_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mtx_;
  std::map<int, size_t> statuses_;
  std::vector<std::thread> threads_;
};

} // namespace cmdbus::test
