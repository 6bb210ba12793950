// The command API under stalled statements (docs/api.md, "Errors"): its
// database backend stopped with SIGSTOP (no statement_timeout can fire in
// it) and a lock held on the queue and command tables. Each stalled request
// ends in 503 by itself while /healthz is answered; the API serves again
// (on a new connection while the old backend is still stopped); and a
// client's retry with the same command id sends each command exactly once,
// also when the stopped backend commits the stalled send after it is
// continued.

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <future>

#include <httplib.h>

#include "api/command_api.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/finally.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

const std::string token = "tok_fault_0123456789";

/// A command API in this process with one database connection, named so
/// that the test finds its backend.
struct stall_env {
  std::string domain = unique_name("apistall");
  std::string app = unique_name("apistall");
  std::unique_ptr<api::command_api> server;

  stall_env() {
    auto c = connect();
    c.query("SELECT pgmq.create($1)", db::command_queue(domain));
    api::api_settings s;
    s.listen = {"127.0.0.1", 0};
    s.dsn = dsn() + " application_name=" + app;
    s.tokens = api::token_store::parse(token + " " + domain, "test");
    s.connections = 1;
    s.threads = 4;
    server = std::make_unique<api::command_api>(s);
  }

  httplib::Result request(const std::string& method, const std::string& path,
                          const std::string& body = "") {
    httplib::Client http{"127.0.0.1", server->port()};
    http.set_read_timeout(60, 0);
    httplib::Headers auth{{"Authorization", "Bearer " + token}};
    if (method == "GET")
      return http.Get(path.c_str(), auth);
    return http.Post(path.c_str(), auth, body, "application/json");
  }

  int post(const std::string& id) {
    auto r = request("POST", "/v1/domains/" + domain + "/commands",
                     R"({"type": "T", "command_id": ")" + id + "\"}");
    return r ? r->status : 0;
  }

  int get(const std::string& id) {
    auto r = request("GET",
                     "/v1/domains/" + domain + "/commands/" + id + "?wait=0");
    return r ? r->status : 0;
  }

  bool healthy() {
    auto r = request("GET", "/healthz");
    return r && r->status == 200;
  }

  /// The pid of the API's backend (0: none connected).
  int backend() {
    auto c = connect();
    auto r = c.query("SELECT pid FROM pg_stat_activity WHERE "
                     "application_name = $1",
                     app);
    return r.rows() == 1 ? static_cast<int>(r.int64(0, 0)) : 0;
  }

  bool backend_gone(int pid) {
    auto c = connect();
    return c.query("SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                   pid)
             .int64(0, 0)
           == 0;
  }

  int64_t commands(const std::string& id) {
    auto c = connect();
    return c
      .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
             "command_id = $2::uuid",
             domain, id)
      .int64(0, 0);
  }

  /// POSTs `id` while the API's backend is stopped: the answer (503
  /// expected), with /healthz checked while the POST is stalled.
  int post_while_stopped(const std::string& id, bool& healthy_meanwhile,
                         bool& stalled_meanwhile) {
    std::atomic<bool> done{false};
    auto answer = std::async(std::launch::async, [&] {
      auto status = post(id);
      done = true;
      return status;
    });
    healthy_meanwhile = healthy();
    stalled_meanwhile = !done.load();
    return answer.get();
  }
};

} // namespace

TEST(ApiFaults, AStoppedBackendIsAServiceUnavailableAndARetrySendsOnce) {
  stall_env env;
  auto warm = new_uuid();
  ASSERT_EQ(env.post(warm), 201);
  auto pid = env.backend();
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGSTOP);
  finally resume{[pid] { ::kill(pid, SIGCONT); }};

  // The send reaches a backend that never answers: 503 by the API's own
  // bound, /healthz answered meanwhile.
  auto first = new_uuid();
  bool healthy = false;
  bool stalled = false;
  EXPECT_EQ(env.post_while_stopped(first, healthy, stalled), 503);
  EXPECT_TRUE(healthy);
  EXPECT_TRUE(stalled) << "/healthz waited for the stalled send";
  EXPECT_GE(env.server->stats().unavailable, 1u);

  // The client retries at once: a new connection sends it, although the
  // old backend is still stopped (with the first send in its socket).
  EXPECT_EQ(env.post(first), 201);
  EXPECT_EQ(env.get(first), 202);
  // Continued, the old backend runs what it was sent: the duplicate fails
  // and rolls back, and its session ends (the API closed it).
  ::kill(pid, SIGCONT);
  EXPECT_TRUE(eventually([&] { return env.backend_gone(pid); }, 20s));
  EXPECT_EQ(env.commands(first), 1);

  // Again, now continued before the client retries: whether the stalled
  // send committed or not, the retry makes it exactly one command.
  auto pid2 = env.backend();
  ASSERT_GT(pid2, 0);
  ASSERT_NE(pid2, pid);
  ::kill(pid2, SIGSTOP);
  finally resume2{[pid2] { ::kill(pid2, SIGCONT); }};
  auto second = new_uuid();
  EXPECT_EQ(env.post_while_stopped(second, healthy, stalled), 503);
  EXPECT_TRUE(healthy);
  ::kill(pid2, SIGCONT);
  EXPECT_TRUE(eventually([&] { return env.backend_gone(pid2); }, 20s));
  auto retry = env.post(second);
  EXPECT_TRUE(retry == 200 || retry == 201) << retry;
  EXPECT_EQ(env.commands(second), 1);
  EXPECT_EQ(env.post(second), 200);
  EXPECT_EQ(env.server->stats().undeclared, 0u);
}

TEST(ApiFaults, ALockHeldOnTheTablesIsAServiceUnavailable) {
  stall_env env;
  auto sent = new_uuid();
  ASSERT_EQ(env.post(sent), 201);
  auto lock = connect();
  lock.exec("BEGIN");
  lock.exec("LOCK TABLE pgmq." + db::queue_table(db::command_queue(env.domain))
            + ", commandbus.command IN ACCESS EXCLUSIVE MODE");
  // A send and a read wait for the lock until the statement timeout:
  // 503, the connection kept; health answered meanwhile.
  auto blocked = new_uuid();
  std::atomic<bool> done{false};
  auto answer = std::async(std::launch::async, [&] {
    auto status = env.post(blocked);
    done = true;
    return status;
  });
  EXPECT_TRUE(env.healthy());
  EXPECT_FALSE(done.load()) << "/healthz waited for the blocked send";
  EXPECT_EQ(answer.get(), 503);
  EXPECT_EQ(env.get(sent), 503);
  auto pid = env.backend();
  lock.exec("COMMIT");
  // Served again at once, on the same connection; the blocked send wrote
  // nothing, and its retry sends it.
  EXPECT_EQ(env.get(sent), 202);
  EXPECT_EQ(env.commands(blocked), 0);
  EXPECT_EQ(env.post(blocked), 201);
  EXPECT_EQ(env.backend(), pid);
  EXPECT_EQ(env.commands(blocked), 1);
  EXPECT_EQ(env.server->stats().undeclared, 0u);
}

// A batch large enough to be written with COPY, whose backend stops while
// its COPY into the command table waits for a lock: no statement timeout
// runs in a stopped backend, so only the API's own bound on the server's
// answer ends the request. 503, /healthz answered meanwhile; once the lock
// is gone a new connection creates the batch, whole and once.
TEST(ApiFaults, ABatchWhoseCopyStallsIsAServiceUnavailable) {
  stall_env env;
  ASSERT_EQ(env.post(new_uuid()), 201);
  auto batch_id = new_uuid();
  std::string body = R"({"batch_id": ")" + batch_id + R"(", "commands": [)";
  for (int i = 0; i < 200; ++i)
    body += std::string{i > 0 ? "," : ""} + R"({"type": "T"})";
  body += "]}";
  auto path = "/v1/domains/" + env.domain + "/batches";
  auto pid = env.backend();
  ASSERT_GT(pid, 0);

  auto lock = connect();
  lock.exec("BEGIN");
  lock.exec("LOCK TABLE commandbus.command IN ACCESS EXCLUSIVE MODE");
  std::atomic<bool> done{false};
  auto answer = std::async(std::launch::async, [&] {
    auto r = env.request("POST", path, body);
    done = true;
    return r ? r->status : 0;
  });
  // Stopped while its COPY waits for the lock (the statements before it
  // ran), so that what stalls is the COPY itself.
  auto observer = connect();
  ASSERT_TRUE(eventually(
    [&] {
      return observer
               .query("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 "
                      "AND wait_event_type = 'Lock' AND query LIKE 'COPY %'",
                      pid)
               .int64(0, 0)
             == 1;
    },
    20s));
  ::kill(pid, SIGSTOP);
  finally resume{[pid] { ::kill(pid, SIGCONT); }};
  lock.exec("COMMIT");

  EXPECT_TRUE(env.healthy());
  EXPECT_FALSE(done.load()) << "/healthz waited for the stalled batch";
  EXPECT_EQ(answer.get(), 503);
  EXPECT_GE(env.server->stats().unavailable, 1u);

  // The stopped backend ends its session once it runs again (the API shut
  // its socket); nothing of the batch was committed, and the retry creates
  // it on a new connection.
  ::kill(pid, SIGCONT);
  EXPECT_TRUE(eventually([&] { return env.backend_gone(pid); }, 20s));
  EXPECT_EQ(observer
              .query("SELECT count(*) FROM commandbus.command WHERE batch_id "
                     "= $1::uuid",
                     batch_id)
              .int64(0, 0),
            0);
  auto retry = env.request("POST", path, body);
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->status, 201) << retry->body;
  EXPECT_EQ(observer
              .query("SELECT count(*) FROM commandbus.command WHERE batch_id "
                     "= $1::uuid",
                     batch_id)
              .int64(0, 0),
            200);
  EXPECT_EQ(env.server->stats().undeclared, 0u);
}
