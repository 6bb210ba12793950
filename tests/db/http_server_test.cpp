// The listener every HTTP endpoint is served by (actors/ops/http_server.hpp),
// in this process with routes of the test's own, on 127.0.0.1: requests
// and keep-alive as cpp-httplib answers them; what it refuses (heads,
// bodies, chunked bodies beyond its limits) and how; slow and silent
// clients cut at the request deadline; room made by closing the oldest
// idle connection first, then the oldest still reading; reserved paths
// answered while every other thread is busy and the queue full; pipelined
// requests; and a stop that closes everything. No database.

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmdbus/actors/ops/http_server.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/gate.hpp"
#include "tests/support/http_clients.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

// Small limits, and deadlines long enough that only the tests that want
// them see them.
http_limits small_limits() {
  http_limits l;
  l.max_connections = 8;
  l.request_timeout = 30s;
  l.idle_timeout = 30s;
  l.max_body_bytes = 1024;
  l.max_head_bytes = 1024;
  l.threads = 1;
  l.max_waiting = 2;
  l.reserved_paths = {"/healthz"};
  return l;
}

// A server on a free port of 127.0.0.1 with GET /hello, POST /echo,
// GET /healthz, and GET /slow (which waits for `release`).
struct test_server {
  explicit test_server(http_limits limits = small_limits())
    : server(std::move(limits), "test listener") {
    auto& r = server.routes();
    r.Get("/hello", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hello", "text/plain");
    });
    r.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
    r.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "text/plain");
    });
    r.Get("/slow", [this](const httplib::Request&, httplib::Response& res) {
      ++slow_entered;
      release.wait(30s);
      res.set_content("slow", "text/plain");
    });
    server.listen({"127.0.0.1", 0});
  }
  ~test_server() {
    release.open();
  }

  int port() const {
    return server.port();
  }

  // A raw connection, counted open by the server before it returns.
  int connect() {
    auto before = server.stats().accepted;
    int fd = connect_loopback(port());
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(eventually([&] { return server.stats().accepted > before; }));
    return fd;
  }

  gate release;
  std::atomic<int> slow_entered{0};
  http_server server;
};

void send_text(int fd, const std::string& text) {
  ASSERT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(text.size()));
}

// Reads one answer (head, and a body of its Content-Length) from `fd`;
// "" when the connection closes first or nothing comes within 10 s. What
// was read beyond it (the next answers) is kept in `pending`.
std::string read_answer(int fd, std::string& pending) {
  std::string& got = pending;
  char buf[4096];
  auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto end = got.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t length = 0;
      auto at = got.find("Content-Length: ");
      if (at != std::string::npos && at < end)
        length = std::stoul(got.substr(at + 16));
      if (got.size() >= end + 4 + length) {
        auto answer = got.substr(0, end + 4 + length);
        got.erase(0, answer.size());
        return answer;
      }
    }
    if (std::chrono::steady_clock::now() >= until)
      return "";
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0)
      continue;
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      return "";
    got.append(buf, static_cast<size_t>(n));
  }
}

std::string read_answer(int fd) {
  std::string pending;
  return read_answer(fd, pending);
}

std::string status_line(const std::string& answer) {
  return answer.substr(0, answer.find("\r\n"));
}

std::string body_of(const std::string& answer) {
  auto end = answer.find("\r\n\r\n");
  return end == std::string::npos ? "" : answer.substr(end + 4);
}

} // namespace

TEST(HttpServer, AnswersRequestsAndKeepsConnectionsAlive) {
  test_server t;
  httplib::Client client{"127.0.0.1", t.port()};
  client.set_keep_alive(true);
  for (int i = 0; i < 3; ++i) {
    auto res = client.Get("/hello");
    ASSERT_TRUE(res) << i;
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, "hello");
    EXPECT_NE(res->get_header_value("Keep-Alive"), "");
  }
  auto echoed = client.Post("/echo", "a body", "text/plain");
  ASSERT_TRUE(echoed);
  EXPECT_EQ(echoed->body, "a body");
  auto missing = client.Get("/nowhere");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  // All on one connection.
  EXPECT_EQ(t.server.stats().accepted, 1u);
  EXPECT_EQ(t.server.stats().open, 1u);
}

TEST(HttpServer, RefusesWhatExceedsItsLimits) {
  test_server t;
  auto refused_with = [&](const std::string& request) {
    int fd = t.connect();
    send_text(fd, request);
    auto got = await_close(fd, 10s);
    ::close(fd);
    return got ? status_line(*got) : "still open";
  };
  EXPECT_EQ(refused_with("GET /hello HTTP/1.1\r\nX-Long: "
                         + std::string(2000, 'x') + "\r\n\r\n"),
            "HTTP/1.1 431 Request Header Fields Too Large");
  // Refused before the end of the head arrives.
  EXPECT_EQ(
    refused_with("GET /hello HTTP/1.1\r\nX-Long: " + std::string(2000, 'x')),
    "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(refused_with("POST /echo HTTP/1.1\r\nContent-Length: 2000\r\n\r\n"),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(
    refused_with(
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
      "0\r\n\r\n"),
    "HTTP/1.1 411 Length Required");
  EXPECT_EQ(refused_with("POST /echo HTTP/1.1\r\nContent-Length: 1x\r\n\r\n"),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(t.server.stats().rejected, 5u);
  // A client that waits for "go on" before its body gets it once, and its
  // answer.
  int fd = t.connect();
  send_text(fd, "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: "
                "100-continue\r\n\r\n");
  EXPECT_EQ(read_answer(fd), "HTTP/1.1 100 Continue\r\n\r\n");
  send_text(fd, "hello");
  auto answer = read_answer(fd);
  EXPECT_EQ(status_line(answer), "HTTP/1.1 200 OK") << answer;
  EXPECT_EQ(body_of(answer), "hello");
  ::close(fd);
}

TEST(HttpServer, CutsClientsThatDoNotSendAWholeRequestInTime) {
  auto limits = small_limits();
  limits.request_timeout = 300ms;
  test_server t{limits};
  int half = t.connect();
  send_text(half, "GET /hello HT");
  int silent = t.connect();
  // Told why (408), and closed; a silent one is just closed.
  auto got = await_close(half, 10s);
  ASSERT_TRUE(got);
  EXPECT_EQ(status_line(*got), "HTTP/1.1 408 Request Timeout");
  got = await_close(silent, 10s);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, "");
  ::close(half);
  ::close(silent);
  EXPECT_EQ(t.server.stats().timed_out, 2u);
  EXPECT_TRUE(eventually([&] { return t.server.stats().open == 0; }));
}

TEST(HttpServer, MakesRoomClosingTheOldestIdleThenTheOldestReading) {
  test_server t;
  // One keep-alive connection, answered and now idle.
  int idle = t.connect();
  send_text(idle, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(status_line(read_answer(idle)), "HTTP/1.1 200 OK");
  // Seven reading a request: the limit (8) is reached.
  std::vector<int> reading;
  for (int i = 0; i < 7; ++i) {
    reading.push_back(t.connect());
    send_text(reading.back(), "GET /hel");
  }
  ASSERT_TRUE(eventually([&] { return t.server.stats().open == 8; }));
  // A newcomer: the idle one goes, the readers stay.
  int first = t.connect();
  auto got = await_close(idle, 10s);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, "");
  for (int fd : reading)
    EXPECT_FALSE(await_close(fd, 0ms));
  // Another: the oldest reader goes.
  int second = t.connect();
  got = await_close(reading.front(), 10s);
  ASSERT_TRUE(got);
  for (size_t i = 1; i < reading.size(); ++i)
    EXPECT_FALSE(await_close(reading[i], 0ms)) << i;
  EXPECT_EQ(t.server.stats().evicted, 2u);
  EXPECT_EQ(t.server.stats().open, 8u);
  // The newcomers are served; with the listener this crowded, an answer
  // closes its connection.
  send_text(second, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  auto answer = read_answer(second);
  EXPECT_EQ(status_line(answer), "HTTP/1.1 200 OK");
  EXPECT_NE(answer.find("Connection: close\r\n"), std::string::npos) << answer;
  for (int fd : reading)
    ::close(fd);
  for (int fd : {idle, first, second})
    ::close(fd);
  EXPECT_TRUE(eventually([&] { return t.server.stats().open == 0; }));
}

TEST(HttpServer, ReservedPathsAnswerWhileEveryThreadIsBusy) {
  test_server t;
  // The one thread holds /slow, two more wait (the queue's limit), a
  // fourth is refused at once.
  std::vector<int> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(t.connect());
    send_text(slow.back(), "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    if (i == 0) {
      ASSERT_TRUE(eventually([&] { return t.slow_entered.load() == 1; }));
    }
  }
  int fourth = t.connect();
  send_text(fourth, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  auto got = await_close(fourth, 10s);
  ASSERT_TRUE(got);
  EXPECT_EQ(status_line(*got), "HTTP/1.1 503 Service Unavailable");
  ::close(fourth);
  // Health is answered meanwhile, repeatedly.
  for (int i = 0; i < 5; ++i) {
    httplib::Client client{"127.0.0.1", t.port()};
    client.set_read_timeout(5s);
    auto res = client.Get("/healthz");
    ASSERT_TRUE(res) << i;
    EXPECT_EQ(res->status, 200);
  }
  t.release.open();
  for (int fd : slow) {
    EXPECT_EQ(body_of(read_answer(fd)), "slow");
    ::close(fd);
  }
  EXPECT_EQ(t.slow_entered.load(), 3);
}

TEST(HttpServer, AnswersPipelinedRequestsInOrder) {
  test_server t;
  int fd = t.connect();
  send_text(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                "POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string pending;
  EXPECT_EQ(body_of(read_answer(fd, pending)), "hello");
  EXPECT_EQ(body_of(read_answer(fd, pending)), "abc");
  EXPECT_EQ(body_of(read_answer(fd, pending)), "ok");
  ::close(fd);
}

TEST(HttpServer, StopClosesEveryConnection) {
  auto t = std::make_unique<test_server>();
  int idle = t->connect();
  send_text(idle, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(status_line(read_answer(idle)), "HTTP/1.1 200 OK");
  int half = t->connect();
  send_text(half, "GET /he");
  auto port = t->port();
  t->server.stop();
  EXPECT_TRUE(await_close(idle, 10s));
  EXPECT_TRUE(await_close(half, 10s));
  EXPECT_EQ(t->server.port(), 0);
  EXPECT_LT(connect_loopback(port), 0);
  ::close(idle);
  ::close(half);
}

TEST(HttpServer, LimitsThatLeaveNoRoomForAProbeAreRefused) {
  auto limits = small_limits();
  limits.max_connections = 6;
  EXPECT_THROW(http_server(limits, "test"), std::invalid_argument);
}
