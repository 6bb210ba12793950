// The worker's HTTP endpoint under clients that misbehave, all on
// 127.0.0.1 against a `cmdbus worker --demo --http` process that keeps
// completing commands: hundreds of connections that send half a request
// line (or nothing) and wait, reopened as soon as they are closed; a flood
// of scrapes; many more connections than the endpoint takes. Health and
// readiness must answer every probe within the client's timeouts while it
// lasts, the worker must go on completing commands, its open descriptors
// must stay bounded and come back to where they were, and every connection
// must get an answer or a close, never a hang.

#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include "cmdbus/actors/ops/http_endpoint.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/http_clients.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

using clock = std::chrono::steady_clock;

// Descriptors the endpoint may add to the worker's at most: one per
// connection it takes, and the one it has just accepted before it makes
// room for it.
int endpoint_descriptor_limit() {
  return static_cast<int>(http_endpoint::limits().max_connections) + 1;
}

// `cmdbus worker --demo` for a domain of its own, its endpoint on a free
// port, and a sender that keeps giving it `Test` commands (about 100 a
// second) until the object goes.
class busy_worker {
public:
  busy_worker() : domain_(unique_name("whl")), port_(free_port()) {
    proc_ = std::make_unique<background_cmdbus>(std::vector<std::string>{
      "worker", "--demo", "--domain", domain_, "--dsn", test::dsn(), "--create",
      "--concurrency", "4", "--poll-interval", "100ms", "--http",
      "127.0.0.1:" + std::to_string(port_), "--quiet"});
    ready_ = eventually(
      [&] { return http_get(port_, "/readyz").status == 200; }, 30s);
    // The endpoint opens its database connection at the first scrape:
    // before a test counts the worker's descriptors.
    http_get(port_, "/metrics");
    sender_ = std::thread{[this] {
      while (!stop_) {
        env_.bus.send(make_req(domain_, "Test"));
        std::this_thread::sleep_for(10ms);
      }
    }};
    // The worker opens some of its database connections at its first
    // completions: before a test counts its descriptors.
    ready_ = ready_ && eventually([&] { return completed() > 0; }, 30s);
  }

  ~busy_worker() {
    stop_ = true;
    sender_.join();
    proc_->stop(20s);
  }

  bool ready() const {
    return ready_;
  }
  int port() const {
    return port_;
  }
  pid_t pid() const {
    return proc_->pid();
  }

  // Commands of the domain the worker has completed.
  int64_t completed() {
    return env_.conn
      .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 "
             "AND status = 'COMPLETED'",
             domain_)
      .int64(0, 0);
  }

private:
  bus_env env_;
  std::string domain_;
  int port_;
  std::unique_ptr<background_cmdbus> proc_;
  std::atomic<bool> stop_{false};
  std::thread sender_;
  bool ready_ = false;
};

// What the probes saw.
struct probing {
  int probes = 0;
  /// "path: status" of each probe without a 200 (0: no answer).
  std::vector<std::string> failed;
  std::chrono::milliseconds slowest{0};
  /// The most descriptors the worker had open meanwhile.
  int largest = 0;
};

// Probes /healthz and /readyz (2 s timeouts each, as http_get does) every
// 100 ms for `hold`, as an orchestrator would.
probing probe_for(int port, pid_t pid, std::chrono::seconds hold) {
  probing p;
  auto until = clock::now() + hold;
  while (clock::now() < until) {
    for (auto* path : {"/healthz", "/readyz"}) {
      auto began = clock::now();
      auto r = http_get(port, path);
      p.slowest = std::max(
        p.slowest, std::chrono::duration_cast<std::chrono::milliseconds>(
                     clock::now() - began));
      ++p.probes;
      if (r.status != 200)
        p.failed.push_back(std::string{path} + ": " + std::to_string(r.status));
    }
    p.largest = std::max(p.largest, open_descriptors(pid));
    std::this_thread::sleep_for(100ms);
  }
  return p;
}

std::string joined(const std::vector<std::string>& lines) {
  std::ostringstream out;
  for (size_t i = 0; i < lines.size() && i < 20; ++i)
    out << lines[i] << "\n";
  if (lines.size() > 20)
    out << "... " << lines.size() - 20 << " more\n";
  return out.str();
}

std::string describe(const std::map<int, size_t>& statuses) {
  std::ostringstream out;
  for (auto& [status, n] : statuses)
    out << status << ": " << n << "  ";
  return out.str();
}

// What both abuse scenarios require of the worker once they end: no probe
// failed while they ran, its descriptors never went past the endpoint's
// limit and are back where they were, and a scrape says it is ready.
void expect_probes_held_and_descriptors_back(const probing& p, pid_t pid,
                                            int baseline, int port) {
  EXPECT_TRUE(p.failed.empty())
    << p.failed.size() << " of " << p.probes << " probes failed:\n"
    << joined(p.failed);
  EXPECT_LE(p.largest, baseline + endpoint_descriptor_limit())
    << "baseline " << baseline;
  EXPECT_TRUE(eventually([&] { return open_descriptors(pid) <= baseline; }))
    << open_descriptors(pid) << " open, " << baseline << " before";
  auto m = scrape(port);
  EXPECT_EQ(m.value("cmdbus_ready", {}), 1) << m.text;
}

} // namespace

TEST(WorkerHttpLimits, HealthAnswersWhileHundredsOfConnectionsHang) {
  busy_worker w;
  ASSERT_TRUE(w.ready());
  auto pid = w.pid();
  ASSERT_GT(pid, 0);
  auto baseline = open_descriptors(pid);
  auto completed_before = w.completed();
  probing p;
  size_t closed_slow = 0;
  size_t closed_idle = 0;
  size_t answered_slow = 0;
  size_t opened = 0;
  {
    // 300 that send half a request line, 100 that send nothing; each
    // reopened 200 ms after the worker closes it.
    hanging_clients slow{w.port(), 300, "GET /metrics HT"};
    hanging_clients idle{w.port(), 100, ""};
    p = probe_for(w.port(), pid, 12s);
    closed_slow = slow.closed_by_server();
    closed_idle = idle.closed_by_server();
    answered_slow = slow.answered();
    opened = slow.opened() + idle.opened();
  }
  auto completed = w.completed() - completed_before;
  std::cout << "[ figures  ] " << p.probes << " probes, " << p.failed.size()
            << " failed, slowest " << p.slowest.count() << " ms; " << completed
            << " commands completed; " << opened << " connections opened, "
            << closed_slow + closed_idle << " closed by the worker ("
            << answered_slow << " with 408); descriptors " << baseline
            << " -> at most " << p.largest << std::endl;
  // Commands went on completing while the connections hung.
  EXPECT_GT(completed, 100);
  // The worker cut them (a read deadline, or to make room) instead of
  // waiting on them, never held more of them than its limit, and once the
  // clients are gone its descriptors are back where they were.
  EXPECT_GE(closed_slow, 300u);
  EXPECT_GE(closed_idle, 100u);
  expect_probes_held_and_descriptors_back(p, pid, baseline, w.port());
}

TEST(WorkerHttpLimits, AFloodOfScrapesLeavesHealthAnswering) {
  busy_worker w;
  ASSERT_TRUE(w.ready());
  auto pid = w.pid();
  ASSERT_GT(pid, 0);
  auto baseline = open_descriptors(pid);
  auto completed_before = w.completed();
  probing p;
  std::map<int, size_t> statuses;
  {
    // 24 clients scrape /metrics and the status page as fast as they are
    // answered, while 200 connections hang on half a request line.
    request_flood flood{w.port(), 24, {"/metrics", "/"}};
    hanging_clients slow{w.port(), 200, "GET / HTTP/1.1\r\nHost: x"};
    p = probe_for(w.port(), pid, 10s);
    flood.stop();
    statuses = flood.statuses();
  }
  auto completed = w.completed() - completed_before;
  std::cout << "[ figures  ] " << p.probes << " probes, " << p.failed.size()
            << " failed, slowest " << p.slowest.count() << " ms; " << completed
            << " commands completed; scrapes by status " << describe(statuses)
            << "; descriptors " << baseline << " -> at most " << p.largest
            << std::endl;
  EXPECT_GT(completed, 100);
  // Scrapes were answered (200, or 503 when too many waited) or their
  // connection closed; none waited until the client gave up.
  EXPECT_GT(statuses[200], 100u) << describe(statuses);
  for (auto& [status, n] : statuses)
    EXPECT_TRUE(status == 200 || status == 503 || status == 0)
      << describe(statuses);
  EXPECT_EQ(statuses.count(-1), 0u) << describe(statuses);
  expect_probes_held_and_descriptors_back(p, pid, baseline, w.port());
}

TEST(WorkerHttpLimits, ExcessConnectionsAreAnsweredOrClosed) {
  busy_worker w;
  ASSERT_TRUE(w.ready());
  auto pid = w.pid();
  ASSERT_GT(pid, 0);
  auto baseline = open_descriptors(pid);
  auto many = 2 * http_endpoint::limits().max_connections;
  auto count_outcomes = [&](const std::vector<int>& fds,
                            std::map<std::string, size_t>& outcomes) {
    // One deadline for all: they are served (or cut) side by side.
    auto until = clock::now() + 15s;
    for (int fd : fds) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - clock::now());
      auto got = await_close(fd, std::max(left, 1ms));
      if (!got)
        ++outcomes["still open"];
      else if (got->empty())
        ++outcomes["closed"];
      else
        ++outcomes[got->substr(0, got->find('\r'))];
      ::close(fd);
    }
  };
  auto describe_outcomes = [](const std::map<std::string, size_t>& o) {
    std::ostringstream out;
    for (auto& [what, n] : o)
      out << "[" << what << "]: " << n << "  ";
    return out.str();
  };
  // Twice as many silent connections as it takes: each is closed,
  // by its read deadline or to make room, none is left waiting.
  {
    std::vector<int> fds;
    for (size_t i = 0; i < many; ++i) {
      int fd = connect_loopback(w.port());
      ASSERT_GE(fd, 0) << "connection " << i;
      fds.push_back(fd);
    }
    std::map<std::string, size_t> outcomes;
    count_outcomes(fds, outcomes);
    std::cout << "[ figures  ] " << many
              << " silent connections: " << describe_outcomes(outcomes)
              << std::endl;
    EXPECT_EQ(outcomes.count("still open"), 0u) << describe_outcomes(outcomes);
  }
  // As many complete requests at once, none read until all are sent:
  // each gets an answer (200, or 503 when too many wait) or a close.
  {
    std::vector<int> fds;
    const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                "Connection: close\r\n\r\n";
    for (size_t i = 0; i < many; ++i) {
      int fd = connect_loopback(w.port());
      ASSERT_GE(fd, 0) << "connection " << i;
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
      fds.push_back(fd);
    }
    std::map<std::string, size_t> outcomes;
    count_outcomes(fds, outcomes);
    std::cout << "[ figures  ] " << many
              << " requests at once: " << describe_outcomes(outcomes)
              << std::endl;
    EXPECT_EQ(outcomes.count("still open"), 0u) << describe_outcomes(outcomes);
    EXPECT_GT(outcomes["HTTP/1.1 200 OK"], 0u) << describe_outcomes(outcomes);
    for (auto& [what, n] : outcomes)
      EXPECT_TRUE(what == "HTTP/1.1 200 OK"
                  || what == "HTTP/1.1 503 Service Unavailable"
                  || what == "closed")
        << describe_outcomes(outcomes);
  }
  // Normal scrapes work afterwards, and the descriptors are back.
  auto m = scrape(w.port());
  EXPECT_EQ(m.value("cmdbus_ready", {}), 1) << m.text;
  EXPECT_EQ(http_get(w.port(), "/").status, 200);
  EXPECT_TRUE(eventually([&] { return open_descriptors(pid) <= baseline; }))
    << open_descriptors(pid) << " open, " << baseline << " before";
}
