#pragma once

// The listener every HTTP endpoint of cmdbus is served by: cpp-httplib
// parses, routes and writes the answers; a front of our own owns the
// sockets and holds every client to the same limits, whatever it sends.
//
// Why not cpp-httplib's own listener (0.11.4): it hands each accepted
// socket to a thread of its task queue, and that thread then waits for the
// request line. Its knobs bound the wrong things: the read timeout is per
// read() (a client sending a byte every few seconds keeps a thread for
// hours; one sending half a line and nothing keeps it for the whole
// timeout), the keep-alive wait holds the thread too, and the queue of
// accepted sockets has no bound and no way to refuse: with two threads,
// 300 silent connections put every later request, /healthz included,
// behind 300 x 5 s of waiting, and the number of descriptors grows with
// the clients. More threads only move the number an attacker needs.
//
// So the front reads requests itself, on one poll() loop that never
// blocks, and gives a thread a connection only once a whole request (head
// and body) is in memory: a slow or silent client costs a descriptor and
// a buffer, never a thread. It:
//   - takes at most `max_connections`; at the limit a new connection makes
//     room by closing the oldest idle keep-alive connection, else the
//     oldest one still sending its request; when every connection is
//     waiting for or getting an answer, the newcomer gets 503 and is
//     closed (never queued behind the others);
//   - closes a connection that has not sent a whole request within
//     `request_timeout` of its accept (or of its next request's first
//     byte) with 408, and an idle keep-alive connection after
//     `idle_timeout`; under pressure (three quarters of the limit in use)
//     answers close their connection;
//   - answers 431, 413 and 411 to heads, bodies and chunked bodies beyond
//     what the listener takes, and 503 when `max_waiting` whole requests
//     already wait for a thread;
//   - answers the `reserved_paths` (health and readiness) on a thread of
//     their own, in a queue of their own: a flood of other requests, or
//     answers slow to write, never make them wait. Together with the room
//     made above, a probe is answered while the listener is exhausted.
//
// With TLS (use_tls, http_tls.hpp) the same front and limits hold: the
// handshake is one more step of reading a request, advanced by the poll
// loop without blocking and under the same deadline (a client that opens
// a connection and never finishes its handshake costs a descriptor and is
// closed at request_timeout, like a silent one); the answers are written
// through the connection's TLS session under the same write_timeout. A
// connection whose handshake fails (plain HTTP, a refused client
// certificate) is closed and counted; the front's own answers before a
// handshake has completed are a close without a word.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cmdbus/config/common.hpp"
#include "cmdbus/config/network_config.hpp"

namespace httplib {
class Server;
} // namespace httplib

namespace cmdbus {

/// What one listener lets its clients take.
struct http_limits {
  /// Connections open at once, whatever they do (also a bound on the
  /// descriptors the listener holds).
  size_t max_connections = 64;
  /// From the accept (or the first byte of a keep-alive connection's next
  /// request) to the whole request in memory.
  std::chrono::milliseconds request_timeout{2000};
  /// How long a keep-alive connection may wait for its next request.
  std::chrono::milliseconds idle_timeout{5000};
  /// To write one answer.
  std::chrono::milliseconds write_timeout{5000};
  /// Bytes of a request line and headers.
  size_t max_head_bytes = 16 * 1024;
  /// Bytes of a body (Content-Length; chunked bodies are refused).
  size_t max_body_bytes = 0;
  /// Requests on one connection before it is closed.
  size_t max_requests_per_connection = 100;
  /// Threads that answer requests (besides the reserved one).
  size_t threads = 2;
  /// Whole requests waiting for a thread, per queue; beyond, 503.
  size_t max_waiting = 16;
  /// Paths (GET or HEAD, without the query) answered on a reserved thread
  /// before anything else, e.g. "/healthz".
  std::vector<std::string> reserved_paths;
  /// The front's own answers (408, 411, 413, 431, 503) carry a JSON body
  /// {"error": {"code", "message"}} instead of a line of text (for
  /// listeners whose clients are programs that read JSON errors).
  bool json_errors = false;
};

/// What a listener has done since it started.
struct http_server_stats {
  /// Connections open now.
  size_t open = 0;
  uint64_t accepted = 0;
  /// Whole requests read and handed to a thread (or its queue).
  uint64_t requests = 0;
  /// Answered 503 at once: every connection was busy.
  uint64_t refused = 0;
  /// Closed to make room for a new one.
  uint64_t evicted = 0;
  /// Closed with 408: no whole request within request_timeout.
  uint64_t timed_out = 0;
  /// Requests answered by the front itself: 503 (too many waiting), 431,
  /// 413, 411.
  uint64_t rejected = 0;
  /// With TLS: connections closed because their handshake failed (not
  /// TLS, no or a refused client certificate, a protocol error), ...
  uint64_t handshakes_failed = 0;
  /// ... of which plain HTTP requests on the TLS port.
  uint64_t plain_http = 0;
};

class http_server {
public:
  /// A listener held to `limits`; `name` starts its log lines (e.g. "HTTP
  /// endpoint"). Throws std::invalid_argument for limits that leave no
  /// room for a probe (max_connections must exceed the threads plus both
  /// queues).
  http_server(http_limits limits, std::string name);
  /// Stops (see stop()).
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Where the handlers are registered (Get, Post, ...), before listen().
  /// Only its routing, parsing and answering are used, never its own
  /// listener.
  httplib::Server& routes();

  /// Serves HTTPS with the certificate set `tls` (see
  /// http_tls::context: certificate and key, passphrase; with a CA file or
  /// directory, clients must present a certificate it signed). Before
  /// listen(). Throws std::runtime_error saying which file cannot be used.
  void use_tls(const config::tls_config& tls);

  /// Whether use_tls() was called.
  bool uses_tls() const noexcept;

  /// Listens on `where` and serves in the background. Throws
  /// std::runtime_error when it cannot (the port is taken, the address is
  /// not one of this machine's).
  void listen(const config::http_address& where);

  /// The port it listens on (the one the system picked for port 0); 0
  /// before listen().
  int port() const noexcept;

  /// Stops listening, closes every connection, and waits for the answers
  /// being written (each bounded by write_timeout). Idempotent.
  void stop();

  http_server_stats stats() const;

  const http_limits& limits() const noexcept;

  /// On a thread answering a request of any http_server: whether its client
  /// has closed the connection (for handlers that wait, e.g. for a
  /// command to finish, and stop waiting for nobody). False elsewhere, and
  /// while the client is there (also when it already sent its next
  /// request).
  static bool client_gone();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace cmdbus
