#pragma once

// A TCP proxy between a test and a server on 127.0.0.1 (`socat`, one forked
// child per connection, all in a process group of their own), to cut the
// connections through it at once: kill -9 of the whole group, so that the
// peers see their connections drop; or to freeze them (SIGSTOP), so that
// they fall silent without being closed.

#include <sys/types.h>

#include "tests/support/free_port.hpp"

namespace cmdbus::test {

class tcp_proxy {
public:
  /// Starts forwarding a free port of 127.0.0.1 to 127.0.0.1:target_port
  /// and waits until it accepts connections; throws when socat cannot be
  /// started.
  explicit tcp_proxy(int target_port);

  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  /// Cuts (if not done yet).
  ~tcp_proxy();

  /// The port it listens on.
  int port() const noexcept {
    return port_;
  }

  /// Kills socat and every connection through it.
  void cut();

  /// Forwards again on the same port after cut() (a database back after
  /// a network cut); does nothing while it forwards.
  void restore();

  /// Stops socat and its connections (SIGSTOP) without closing anything:
  /// the peers see a silent connection, like a hung host.
  void freeze();

private:
  /// Starts socat and waits until it accepts connections.
  void start();

  int port_ = 0;
  int target_port_ = 0;
  pid_t pid_ = -1;
};

} // namespace cmdbus::test
