#include "cmdbus/actors/ops/http_server.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include "cmdbus/actors/ops/http_connection.hpp"
#include "cmdbus/actors/ops/http_tls.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus {

namespace {

using namespace http_conn;
using http_conn::clock;

/// cpp-httplib's server, used for what it does well: parsing a request
/// from a stream, routing it and writing the answer (its protected
/// process_request, which its own listener calls per request). It never
/// listens.
class router : public httplib::Server {
public:
  using httplib::Server::process_request;
};

/// The connection the calling thread answers (client_gone), null when
/// none.
thread_local connection* answering = nullptr;

} // namespace

struct http_server::impl {
  http_limits limits;
  std::string name;
  router routes;
  int listen_fd = -1;
  int wake_fd = -1;
  int port = 0;
  std::thread front;
  std::vector<std::thread> answerers;
  std::atomic<bool> stopping{false};
  std::mutex stop_mtx;
  bool stopped = false;
  /// With TLS (use_tls).
  std::unique_ptr<http_tls::context> tls;

  // The front's own (its thread only): connections reading or idle.
  conn_list reading;
  clock::time_point accept_paused_until;

  // Shared with the answering threads.
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<conn_ptr> reserved_queue;
  std::deque<conn_ptr> queue;
  std::vector<conn_ptr> returned;
  bool quit = false;

  std::atomic<size_t> open{0};
  /// Three quarters of the connections in use: answers close theirs.
  std::atomic<bool> crowded{false};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> evicted{0};
  std::atomic<uint64_t> timed_out{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> handshakes_failed{0};
  std::atomic<uint64_t> plain_http{0};

  // Logging of the front's interventions (its thread only): one line when
  // they begin, one a minute while they go on, one when they stop.
  bool poll_failing = false;
  bool shedding = false;
  uint64_t shed_seen = 0;
  clock::time_point last_shed;
  clock::time_point last_shed_line;

  impl(http_limits l, std::string n)
    : limits(std::move(l)), name(std::move(n)) {
    // nop
  }

  // -- the front ------------------------------------------------------------

  void run_front() {
    std::vector<pollfd> fds;
    std::vector<conn_list::iterator> polled;
    while (!stopping) {
      auto now = clock::now();
      fds.clear();
      polled.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      bool accepting = now >= accept_paused_until;
      fds.push_back({accepting ? listen_fd : -1, POLLIN, 0});
      auto next = now + std::chrono::seconds{1};
      if (!accepting)
        next = std::min(next, accept_paused_until);
      for (auto it = reading.begin(); it != reading.end(); ++it) {
        short events = POLLIN;
        if ((*it)->wants_write)
          events |= POLLOUT;
        fds.push_back({(*it)->fd, events, 0});
        polled.push_back(it);
        next = std::min(next, (*it)->deadline);
      }
      // +1: a deadline less than a millisecond away is not passed by
      // waiting 0 ms.
      auto n = ::poll(fds.data(), fds.size(), millis_until(next, now) + 1);
      if (n < 0 && errno != EINTR) {
        // Out of memory in the kernel: nothing to do but wait and try
        // again (the deadlines are kept on the next turn).
        if (!poll_failing)
          log::from("http").error("{}: poll failed ({}); trying again "
                                  "every 100 ms",
                                  name, std::strerror(errno));
        poll_failing = true;
        std::this_thread::sleep_for(milliseconds{100});
        continue;
      }
      if (poll_failing)
        log::from("http").info("{}: poll works again", name);
      poll_failing = false;
      now = clock::now();
      if (n > 0) {
        if (fds[0].revents != 0) {
          uint64_t count;
          while (::read(wake_fd, &count, sizeof count) > 0) {
            // drained
          }
        }
        for (size_t i = 0; i < polled.size(); ++i)
          if (fds[i + 2].revents != 0)
            on_readable(polled[i], now);
        if (fds[1].revents != 0)
          accept_some(now);
      }
      take_returned(now);
      expire(now);
      crowded = open.load() * 4 >= limits.max_connections * 3;
      log_shedding(now);
    }
    for (auto& c : reading)
      close_connection(*c);
    open -= reading.size();
    reading.clear();
  }

  void accept_some(clock::time_point now) {
    auto budget = std::max<size_t>(8, limits.max_connections / 4);
    while (budget-- > 0) {
      int fd = ::accept4(listen_fd, nullptr, nullptr,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED)
          continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          return;
        // Out of descriptors or memory elsewhere in the process: leave the
        // connections in the backlog a moment instead of spinning on them.
        log::from("http").warn("{}: cannot accept a connection ({}); "
                               "trying again in 100 ms",
                               name, std::strerror(errno));
        accept_paused_until = now + milliseconds{100};
        return;
      }
      ++accepted;
      if (open.load() >= limits.max_connections && !make_room(now)) {
        ++refused;
        // (A TLS client hears nothing before its handshake.)
        if (!tls)
          send_answer(fd, 503, limits.json_errors);
        close_socket(fd);
        continue;
      }
      ++open;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<connection>();
      c->fd = fd;
      if (tls) {
        try {
          c->tls = std::make_unique<http_tls::session>(*tls, fd);
        } catch (const std::exception& e) {
          log::from("http").warn("{}: {}", name, e.what());
          --open;
          close_socket(fd);
          continue;
        }
      }
      c->since = now;
      c->deadline = now + limits.request_timeout;
      reading.push_back(std::move(c));
      // Its request is often there already.
      on_readable(std::prev(reading.end()), now);
    }
  }

  /// Closes the oldest idle connection, else the oldest still reading its
  /// request; false when every connection waits for or gets an answer. A
  /// candidate is read once more first: one whose whole request has come
  /// since the last turn (a probe, typically) is not slow, and is handed
  /// to a thread instead.
  bool make_room(clock::time_point now) {
    for (int tries = 0; tries < 16; ++tries) {
      auto victim = reading.end();
      for (int pass = 0; pass < 2 && victim == reading.end(); ++pass)
        for (auto it = reading.begin(); it != reading.end(); ++it)
          if ((*it)->idle == (pass == 0)
              && (victim == reading.end() || (*it)->since < (*victim)->since))
            victim = it;
      if (victim == reading.end())
        return false;
      auto before = open.load();
      if (!on_readable(victim, now)) {
        // Handed over (still open: look again), or closed by the client.
        if (open.load() < before)
          return true;
        continue;
      }
      ++evicted;
      close_reading(victim);
      return true;
    }
    return false;
  }

  conn_list::iterator close_reading(conn_list::iterator it) {
    close_connection(**it);
    --open;
    return reading.erase(it);
  }

  /// Reads what `it` sent and acts on it; false when it left `reading`
  /// (handed over, answered or closed).
  bool on_readable(conn_list::iterator it, clock::time_point now) {
    auto& c = **it;
    if (c.tls && !c.tls->established() && !handshake(it))
      return false;
    if (c.tls && !c.tls->established())
      return true;
    char buf[16384];
    // Enough to decide on any request: a head and a body at their limits.
    auto enough = limits.max_head_bytes + limits.max_body_bytes + sizeof buf;
    while (c.in.size() < enough) {
      auto n = read_some(c, buf, sizeof buf);
      if (n > 0) {
        if (c.idle) {
          c.idle = false;
          c.since = now;
          c.deadline = now + limits.request_timeout;
        }
        c.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        c.peer_done = true;
        break;
      }
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      close_reading(it);
      return false;
    }
    return examine(it, now);
  }

  /// Advances the TLS handshake of `it`; false when it failed (the
  /// connection is then closed and counted). Its deadline is the
  /// request's: the handshake is part of sending a request.
  bool handshake(conn_list::iterator it) {
    auto& c = **it;
    auto next = c.tls->handshake();
    c.wants_write = next == http_tls::wants::write;
    if (!c.tls->failed())
      return true;
    // A client that leaves (a port check, a client given up) is no
    // failure.
    if (c.tls->peer_left()) {
      close_reading(it);
      return false;
    }
    ++handshakes_failed;
    if (c.tls->plain_http()) {
      ++plain_http;
      // It speaks HTTP: say in HTTP what to do (no TLS session to write
      // through yet).
      static constexpr std::string_view text
        = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
          "Content-Length: 30\r\nConnection: close\r\n\r\n"
          "This port speaks HTTPS only.\r\n";
      ::send(c.fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    log::from("http").debug("{}: TLS handshake: {}", name,
                            c.tls->failure());
    close_reading(it);
    return false;
  }

  /// Hands a whole request to a thread, answers a bad one, or goes on
  /// reading (true: it stays in `reading`).
  bool examine(conn_list::iterator it, clock::time_point) {
    auto& c = **it;
    if (c.request_size == 0 && !c.in.empty()) {
      if (auto status = read_head(c); status != 0) {
        ++rejected;
        send_answer(c, status, limits.json_errors);
        close_reading(it);
        return false;
      }
    }
    if (c.request_size > 0 && c.in.size() >= c.request_size) {
      dispatch(it);
      return false;
    }
    if (c.peer_done) {
      close_reading(it);
      return false;
    }
    return true;
  }

  /// Looks for the end of the head of the request `c` is reading; once it
  /// is there, sets request_size and whether the path is reserved. Returns
  /// the status to refuse the request with, or 0.
  int read_head(connection& c) {
    auto from = c.scanned >= 3 ? c.scanned - 3 : 0;
    auto end = c.in.find("\r\n\r\n", from);
    if (end == std::string::npos) {
      c.scanned = c.in.size();
      return c.in.size() > limits.max_head_bytes ? 431 : 0;
    }
    auto head_size = end + 4;
    if (head_size > limits.max_head_bytes)
      return 431;
    std::string_view head{c.in.data(), end + 2};
    auto line_end = head.find("\r\n");
    auto line = head.substr(0, line_end);
    auto sp = line.find(' ');
    auto method = line.substr(0, sp);
    auto target = sp == std::string_view::npos ? std::string_view{}
                                               : line.substr(sp + 1);
    target = target.substr(0, target.find(' '));
    auto path = target.substr(0, target.find('?'));
    c.reserved = (method == "GET" || method == "HEAD")
                 && std::find(limits.reserved_paths.begin(),
                              limits.reserved_paths.end(), path)
                      != limits.reserved_paths.end();
    size_t body = 0;
    bool has_length = false;
    bool chunked = false;
    size_t expect_begin = 0;
    size_t expect_end = 0;
    for (auto pos = line_end + 2; pos < head.size();) {
      auto eol = head.find("\r\n", pos);
      auto field = head.substr(pos, eol - pos);
      auto colon = field.find(':');
      if (colon != std::string_view::npos) {
        auto key = lowercase(trimmed(field.substr(0, colon)));
        auto value = trimmed(field.substr(colon + 1));
        if (key == "content-length") {
          if (value.empty() || value.size() > 18
              || value.find_first_not_of("0123456789")
                   != std::string_view::npos)
            return 400;
          auto length = static_cast<size_t>(std::stoull(std::string{value}));
          if (has_length && length != body)
            return 400;
          has_length = true;
          body = length;
        } else if (key == "transfer-encoding") {
          chunked = true;
        } else if (key == "expect" && lowercase(value) == "100-continue") {
          expect_begin = pos;
          expect_end = eol + 2;
        }
      }
      pos = eol + 2;
    }
    if (chunked)
      return 411;
    if (body > limits.max_body_bytes)
      return 413;
    if (expect_end > 0) {
      // The front reads the body, so it says "go on" itself; the router
      // must not say it again.
      c.in.erase(expect_begin, expect_end - expect_begin);
      head_size -= expect_end - expect_begin;
      if (body > 0 && c.in.size() < head_size + body) {
        static constexpr std::string_view go_on
          = "HTTP/1.1 100 Continue\r\n\r\n";
        send_now(c, go_on);
      }
    }
    c.request_size = head_size + body;
    return 0;
  }

  void dispatch(conn_list::iterator it) {
    auto c = std::move(*it);
    reading.erase(it);
    {
      std::lock_guard<std::mutex> guard{mtx};
      auto& q = c->reserved ? reserved_queue : queue;
      if (q.size() < limits.max_waiting) {
        q.push_back(std::move(c));
        ++requests;
      }
    }
    if (c) {
      // Too many wait already: say so at once rather than queue it.
      ++rejected;
      send_answer(*c, 503, limits.json_errors);
      close_connection(*c);
      --open;
      return;
    }
    cv.notify_all();
  }

  /// Takes back the connections answered since the last turn: closed, or
  /// reading (or idle) again.
  void take_returned(clock::time_point now) {
    std::vector<conn_ptr> back;
    {
      std::lock_guard<std::mutex> guard{mtx};
      back.swap(returned);
    }
    for (auto& c : back) {
      if (c->close) {
        close_connection(*c);
        --open;
        continue;
      }
      c->since = now;
      c->idle = c->in.empty();
      c->deadline = now
                    + (c->idle ? limits.idle_timeout : limits.request_timeout);
      reading.push_back(std::move(c));
      // A client that sent its next request already (pipelining). With
      // TLS, its session may hold bytes the socket no longer shows (read
      // with a record, or while the answer's thread looked for a close):
      // read them now, as poll() would not say.
      if (reading.back()->tls)
        on_readable(std::prev(reading.end()), now);
      else if (!reading.back()->idle)
        examine(std::prev(reading.end()), now);
    }
  }

  void expire(clock::time_point now) {
    for (auto it = reading.begin(); it != reading.end();) {
      auto& c = **it;
      if (c.deadline > now) {
        ++it;
        continue;
      }
      if (!c.idle) {
        ++timed_out;
        // A client that sent part of a request is told why it is closed.
        if (!c.in.empty())
          send_answer(c, 408, limits.json_errors);
      }
      it = close_reading(it);
    }
  }

  void log_shedding(clock::time_point now) {
    auto total = refused.load() + evicted.load() + timed_out.load()
                 + rejected.load() + handshakes_failed.load();
    if (total != shed_seen) {
      shed_seen = total;
      last_shed = now;
      if (!shedding || now - last_shed_line >= std::chrono::minutes{1}) {
        log::from("http").warn(
          "{}: closing connections that exceed its limits ({} open of {}; "
          "so far {} refused with 503, {} closed to make room, {} too slow "
          "to send a request, {} requests refused, {} failed TLS handshakes "
          "of which {} plain HTTP)",
          name, open.load(), limits.max_connections, refused.load(),
          evicted.load(), timed_out.load(), rejected.load(),
          handshakes_failed.load(), plain_http.load());
        shedding = true;
        last_shed_line = now;
      }
    } else if (shedding && now - last_shed >= std::chrono::seconds{10}) {
      log::from("http").info("{}: no connection exceeded its limits for 10 "
                             "s ({} open)",
                             name, open.load());
      shedding = false;
    }
  }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // -- the answering threads -----------------------------------------------

  void run_answers(bool reserved_only) {
    for (;;) {
      conn_ptr c;
      {
        std::unique_lock<std::mutex> lock{mtx};
        cv.wait(lock, [&] {
          return quit || !reserved_queue.empty()
                 || (!reserved_only && !queue.empty());
        });
        if (quit)
          return;
        auto& q = reserved_queue.empty() ? queue : reserved_queue;
        c = std::move(q.front());
        q.pop_front();
      }
      answer(*c);
      {
        std::lock_guard<std::mutex> guard{mtx};
        returned.push_back(std::move(c));
      }
      wake();
    }
  }

  void answer(connection& c) {
    request_stream strm{c, clock::now() + limits.write_timeout};
    answering = &c;
    bool last = c.served + 1 >= limits.max_requests_per_connection
                || c.peer_done || crowded.load() || stopping.load();
    bool closed = false;
    bool ok = false;
    try {
      ok = routes.process_request(strm, last, closed, nullptr);
    } catch (const std::exception& e) {
      log::from("http").error("{}: a request failed: {}", name,
                              log::one_line(e.what()));
    } catch (...) {
      log::from("http").error("{}: a request failed with an exception "
                              "that is not a std::exception",
                              name);
    }
    // A request the router did not read to its end leaves the connection
    // where nobody knows what comes next.
    answering = nullptr;
    c.close = !ok || closed || last || strm.consumed() != c.request_size;
    c.in.erase(0, c.request_size);
    c.request_size = 0;
    c.scanned = 0;
    ++c.served;
  }
};

http_server::http_server(http_limits limits, std::string name)
  : impl_(std::make_unique<impl>(std::move(limits), std::move(name))) {
  auto& l = impl_->limits;
  auto reserved = l.reserved_paths.empty() ? 0 : 1;
  if (l.threads == 0 || l.max_waiting == 0 || l.max_requests_per_connection == 0
      || l.max_head_bytes == 0 || l.request_timeout.count() <= 0
      || l.idle_timeout.count() <= 0 || l.write_timeout.count() <= 0)
    throw std::invalid_argument("HTTP limits: threads, max_waiting, "
                                "max_requests_per_connection, max_head_bytes "
                                "and the timeouts must be positive");
  if (l.max_connections <= l.threads + reserved + 2 * l.max_waiting)
    throw std::invalid_argument(
      "HTTP limits: max_connections must exceed the threads and both queues "
      "("
      + std::to_string(l.threads + reserved + 2 * l.max_waiting) + ")");
  // What the router writes in its Keep-Alive header.
  impl_->routes.set_keep_alive_max_count(l.max_requests_per_connection);
  impl_->routes.set_keep_alive_timeout(std::max<time_t>(
    1,
    std::chrono::duration_cast<std::chrono::seconds>(l.idle_timeout).count()));
}

http_server::~http_server() {
  stop();
}

httplib::Server& http_server::routes() {
  return impl_->routes;
}

void http_server::listen(const config::http_address& where) {
  auto& d = *impl_;
  if (d.listen_fd >= 0 || d.stopped)
    throw std::logic_error("http_server::listen called twice");
  auto where_text = where.host + ":" + std::to_string(where.port);
  auto fail = [&](const std::string& why) {
    return std::runtime_error("cannot listen on " + where_text + " for the "
                              + d.name + ": " + why);
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  auto service = std::to_string(where.port);
  if (auto rc = ::getaddrinfo(where.host.c_str(), service.c_str(), &hints,
                              &found);
      rc != 0)
    throw fail(::gai_strerror(rc));
  std::string why = "no address";
  for (auto* a = found; a != nullptr && d.listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // A long backlog: bursts of connections wait in the kernel (costing
    // no descriptor) until the front takes or refuses them.
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0
        || ::listen(fd, SOMAXCONN) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      continue;
    }
    d.listen_fd = fd;
  }
  ::freeaddrinfo(found);
  if (d.listen_fd < 0)
    throw fail(why);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  std::string ip;
  if (::getsockname(d.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    address_of(addr, len, ip, d.port);
  d.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (d.wake_fd < 0 || d.port <= 0) {
    why = std::strerror(errno);
    ::close(d.listen_fd);
    d.listen_fd = -1;
    d.port = 0;
    throw fail(why);
  }
  for (size_t i = 0; i < d.limits.threads; ++i)
    d.answerers.emplace_back([&d] { d.run_answers(false); });
  if (!d.limits.reserved_paths.empty())
    d.answerers.emplace_back([&d] { d.run_answers(true); });
  d.front = std::thread{[&d] { d.run_front(); }};
}

void http_server::use_tls(const config::tls_config& tls) {
  if (impl_->listen_fd >= 0 || impl_->stopped)
    throw std::logic_error("http_server::use_tls called after listen");
  impl_->tls = std::make_unique<http_tls::context>(tls);
}

bool http_server::uses_tls() const noexcept {
  return impl_->tls != nullptr;
}

int http_server::port() const noexcept {
  return impl_->port;
}

void http_server::stop() {
  auto& d = *impl_;
  {
    std::lock_guard<std::mutex> guard{d.stop_mtx};
    if (d.stopped)
      return;
    d.stopped = true;
  }
  d.stopping = true;
  if (d.wake_fd >= 0)
    d.wake();
  if (d.front.joinable())
    d.front.join();
  if (d.listen_fd >= 0)
    ::close(d.listen_fd);
  {
    std::lock_guard<std::mutex> guard{d.mtx};
    d.quit = true;
  }
  d.cv.notify_all();
  for (auto& t : d.answerers)
    t.join();
  // What waited for an answer, or came back after the front ended.
  for (auto* q : {&d.reserved_queue, &d.queue})
    for (auto& c : *q)
      close_connection(*c);
  for (auto& c : d.returned)
    close_connection(*c);
  d.open = 0;
  if (d.wake_fd >= 0)
    ::close(d.wake_fd);
  d.port = 0;
}

http_server_stats http_server::stats() const {
  auto& d = *impl_;
  http_server_stats s;
  s.open = d.open.load();
  s.accepted = d.accepted.load();
  s.requests = d.requests.load();
  s.refused = d.refused.load();
  s.evicted = d.evicted.load();
  s.timed_out = d.timed_out.load();
  s.rejected = d.rejected.load();
  s.handshakes_failed = d.handshakes_failed.load();
  s.plain_http = d.plain_http.load();
  return s;
}

const http_limits& http_server::limits() const noexcept {
  return impl_->limits;
}

bool http_server::client_gone() {
  if (answering == nullptr)
    return false;
  // With TLS the socket shows records, not the stream: the session looks
  // (what it reads stays in it for the front, see take_returned).
  if (answering->tls)
    return answering->tls->peer_closed();
  char byte = 0;
  auto n = ::recv(answering->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0)
    return false;
  if (n == 0)
    return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

} // namespace cmdbus
