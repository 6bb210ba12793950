#pragma once

// TLS for http_server (http_server.hpp): OpenSSL's server context made
// from the [tls] certificate set, and one session per connection, driven
// without ever blocking. The front's poll loop advances a session's
// handshake as it reads a request; the thread that answers writes through
// the same session (a connection belongs to one thread at a time, so a
// session is never used by two at once).
//
// As in actors/tls_transport.hpp, every OpenSSL call is preceded and
// followed by clearing the calling thread's error queue: OpenSSL keeps one
// queue per thread, and SSL_get_error reads any entry left there as the
// failure of the call it is asked about, so one client's failed handshake
// would otherwise close another's healthy connection. A call that would
// block answers "wait for readable (or writable)", never a loop.
//
// No OpenSSL headers here: the library's other files do not see them.

#include <cstddef>
#include <memory>
#include <string>
#include <sys/types.h>

#include "cmdbus/config/network_config.hpp"

namespace cmdbus::http_tls {

/// What a session's call needs before it can go on.
enum class wants {
  /// Done (or, for read and write: bytes moved).
  nothing,
  /// The socket to be readable.
  read,
  /// The socket to be writable.
  write,
};

/// The server context of one listener: its certificate and key, and, with
/// a CA file or directory, the clients' certificates are required and
/// verified against it (mutual TLS). TLS 1.2 or later; no session tickets
/// or resumption (each connection makes a full handshake).
class context {
public:
  /// Loads `tls` (certificate and key required; passphrase for an
  /// encrypted key; ca_file / ca_path: mutual TLS). Throws
  /// std::runtime_error with OpenSSL's reason when a file cannot be used
  /// or the key does not match the certificate.
  explicit context(const config::tls_config& tls);
  ~context();
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  /// Whether clients must present a certificate the CA signed.
  bool verifies_clients() const noexcept {
    return verify_clients_;
  }

  /// The context (an SSL_CTX*), for session.
  void* native() const noexcept {
    return ctx_;
  }

private:
  void* ctx_ = nullptr;
  bool verify_clients_ = false;
};

/// The TLS side of one accepted connection (non-blocking socket `fd`).
class session {
public:
  /// Throws std::runtime_error when OpenSSL cannot make one (out of
  /// memory).
  session(const context& ctx, int fd);
  /// Frees the session (without a close_notify: see close()).
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  /// Advances the handshake. wants::nothing once it has completed;
  /// failed() when it cannot (not TLS, a refused certificate, a protocol
  /// error): the connection is to be closed.
  wants handshake();

  /// Whether the handshake has completed.
  bool established() const noexcept {
    return established_;
  }

  /// Whether the connection failed for good (its reason is in
  /// failure()).
  bool failed() const noexcept {
    return failed_;
  }

  /// Why the handshake or a read or write failed, in one line.
  const std::string& failure() const noexcept {
    return failure_;
  }

  /// Whether the failed handshake was a plain HTTP request.
  bool plain_http() const noexcept {
    return plain_http_;
  }

  /// Whether it failed because the client closed the connection (not a
  /// protocol error of its).
  bool peer_left() const noexcept {
    return peer_left_;
  }

  /// Reads up to `size` bytes: > 0 bytes read; 0 the client closed (also
  /// without a close_notify); -1 nothing now (`next` says what to wait
  /// for) or, when failed(), an error.
  ssize_t read(char* buf, size_t size, wants& next);

  /// Writes up to `size` (> 0) bytes: > 0 bytes written; -1 nothing now
  /// (`next` says what to wait for) or, when failed(), an error. A call
  /// after -1 must offer the same bytes again.
  ssize_t write(const char* buf, size_t size, wants& next);

  /// Whether the client closed the connection (a close_notify, or the end
  /// of the stream), read without blocking; what it sent meanwhile (its
  /// next request) stays in the session for read().
  bool peer_closed();

  /// Sends a close_notify once, without waiting, when the session is
  /// healthy; the socket stays open (the caller closes it).
  void close();

private:
  /// Turns the outcome `rc` of a call into `wants` or a failure.
  wants outcome(int rc, const char* what);

  void* ssl_ = nullptr;
  bool established_ = false;
  bool failed_ = false;
  bool plain_http_ = false;
  bool peer_left_ = false;
  bool closed_ = false;
  std::string failure_;
};

} // namespace cmdbus::http_tls
