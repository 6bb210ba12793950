// The command API (`cmdbus api`, api/command_api.hpp) against the real
// database: a client (curl) sends commands and waits for them while the
// demo worker runs them, through every answer the API gives (201, 200 for
// a repeat, 409, 200 with the result, 422, 202, 404, 400, 401, 403, 413);
// the API under a cut database connection (503 with a JSON error, health
// still answered, then back by itself); a waiting GET whose client goes
// away frees its thread; and kill -9 of the API loses no acknowledged
// command, a client's retry with the same ids sends each exactly once.

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/command_api.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/http_clients.hpp"
#include "tests/support/process.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

const std::string token = "tok_orders_0123456789";
const std::string other_token = "tok_other_0123456789";
const std::string admin_token = "tok_admin_0123456789";

std::string tokens_for(const std::string& domain) {
  return token + " " + domain + ";" + other_token + " elsewhere;" + admin_token
         + " *";
}

struct reply {
  int status = 0;
  std::string headers;
  std::string body;
};

/// One request with curl (`token` empty: without Authorization).
reply curl(int port, const std::string& method, const std::string& path,
           const std::string& tok,
           const std::optional<std::string>& body = std::nullopt) {
  std::vector<std::string> argv{"/usr/bin/curl",
                                "-s",
                                "-i",
                                "--max-time",
                                "40",
                                "-X",
                                method,
                                "http://127.0.0.1:" + std::to_string(port)
                                  + path};
  if (!tok.empty())
    argv.insert(argv.end(), {"-H", "Authorization: Bearer " + tok});
  if (body)
    argv.insert(argv.end(), {"-H", "Content-Type: application/json",
                             "--data-binary", "@-"});
  auto r = run_process(argv, {}, body);
  reply out;
  auto split = r.out.find("\r\n\r\n");
  out.headers = r.out.substr(0, split);
  out.body = split == std::string::npos ? "" : r.out.substr(split + 4);
  if (r.out.rfind("HTTP/1.1 ", 0) == 0)
    out.status = std::stoi(r.out.substr(9, 3));
  return out;
}

bool has(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

int64_t commands_with_id(const std::string& domain, const std::string& id) {
  auto c = connect();
  return c
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
           "command_id = $2::uuid",
           domain, id)
    .int64(0, 0);
}

bool queue_exists(const std::string& domain) {
  auto c = connect();
  return db::queue_exists(c, db::command_queue(domain));
}

void create_queue(const std::string& domain) {
  auto c = connect();
  c.query("SELECT pgmq.create($1)", db::command_queue(domain));
}

/// A `cmdbus api` on a free loopback port, serving once /healthz answers.
struct api_process {
  int port = free_port();
  background_cmdbus proc;

  explicit api_process(const std::string& tokens)
    : proc({"api", "--listen", "127.0.0.1:" + std::to_string(port), "--dsn",
            dsn()},
           {"CMDBUS_API_TOKENS=" + tokens}) {
    // nop
  }

  bool serving() {
    return eventually(
      [&] { return curl(port, "GET", "/healthz", "").status == 200; }, 15s);
  }
};

} // namespace

TEST(Api, SendsAndWaitsThroughEveryAnswer) {
  auto d = unique_name("api");
  background_cmdbus worker{
    {"worker", "--demo", "--domain", d, "--create", "--dsn", dsn()}};
  ASSERT_TRUE(eventually([&] { return queue_exists(d); }, 15s));
  api_process api{tokens_for(d)};
  ASSERT_TRUE(api.serving());
  auto port = api.port;
  auto commands = "/v1/domains/" + d + "/commands";
  std::string ok_id = new_uuid();
  std::string ok_body = R"({"type": "Test", "command_id": ")" + ok_id
                        + R"(", "reply_to": ")" + d + R"(_replies",
    "data": {"behavior": {"outcome": "success", "result": {"total": 12.50}}}})";

  // Who may send: nobody without a token, nobody with a wrong one, and
  // only for the domains a token grants.
  auto r = curl(port, "POST", commands, "", ok_body);
  EXPECT_EQ(r.status, 401);
  EXPECT_TRUE(has(r.headers, "WWW-Authenticate: Bearer")) << r.headers;
  EXPECT_TRUE(has(r.body, R"("code":"unauthorized")")) << r.body;
  EXPECT_EQ(
    curl(port, "POST", commands, "not_a_token_at_all_x", ok_body).status, 401);
  r = curl(port, "POST", commands, other_token, ok_body);
  EXPECT_EQ(r.status, 403);
  EXPECT_TRUE(has(r.body, "does not grant domain " + d)) << r.body;
  EXPECT_EQ(commands_with_id(d, ok_id), 0);

  // Sent once; the same request again is a repeat; another one with the
  // same id a conflict.
  r = curl(port, "POST", commands, token, ok_body);
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_TRUE(has(r.body, R"("command_id":")" + ok_id)) << r.body;
  r = curl(port, "POST", commands, token, ok_body);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(has(r.body, R"("created":false)")) << r.body;
  auto changed = ok_body;
  changed.replace(changed.find(R"("Test")"), 6, R"("Other")");
  r = curl(port, "POST", commands, token, changed);
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_TRUE(has(r.body, "first used by a different request")) << r.body;
  EXPECT_EQ(commands_with_id(d, ok_id), 1);

  // Waited for: completed, with the handler's result from the reply.
  r = curl(port, "GET", commands + "/" + ok_id + "?wait=20s", token);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(has(r.body, R"("status":"COMPLETED")")) << r.body;
  // (The demo handler writes its result's numbers anew: 12.50 is 12.5.)
  EXPECT_TRUE(has(r.body, R"("result":{"total":12.5)")) << r.body;

  // A business-rule failure: 422 with the error.
  auto failed_id = new_uuid();
  r = curl(port, "POST", commands, token,
           R"({"type": "Test", "command_id": ")" + failed_id
             + R"(", "data": {"behavior": {"outcome": "business_rule"}}})");
  EXPECT_EQ(r.status, 201) << r.body;
  r = curl(port, "GET", commands + "/" + failed_id + "?wait=20s", token);
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_TRUE(has(r.body, R"("status":"FAILED")")) << r.body;
  EXPECT_TRUE(has(r.body, R"("code":"DEMO_BUSINESS_RULE")")) << r.body;

  // Not due for an hour: still pending when the wait ends.
  auto later_id = new_uuid();
  r = curl(port, "POST", commands, admin_token,
           R"({"type": "Test", "delay": "1h", "command_id": ")" + later_id
             + "\"}");
  EXPECT_EQ(r.status, 201) << r.body;
  r = curl(port, "GET", commands + "/" + later_id + "?wait=200ms", token);
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_TRUE(has(r.headers, "Retry-After: 1")) << r.headers;
  EXPECT_TRUE(has(r.body, R"("status":"PENDING","final":false)")) << r.body;
  // Its message is still in the queue: a payload of its own is compared
  // too (a repeat, then a conflict).
  auto later_body = R"({"type": "Test", "delay": "1h", "command_id": ")"
                    + new_uuid() + R"(", "data": {"n": 1.0}})";
  EXPECT_EQ(curl(port, "POST", commands, admin_token, later_body).status, 201);
  EXPECT_EQ(curl(port, "POST", commands, admin_token, later_body).status, 200);
  auto other_data = later_body;
  other_data.replace(other_data.find("1.0"), 3, "2.0");
  EXPECT_EQ(curl(port, "POST", commands, admin_token, other_data).status, 409);

  // Unknown command, unknown domain, unknown path.
  r = curl(port, "GET", commands + "/" + new_uuid() + "?wait=0", token);
  EXPECT_EQ(r.status, 404) << r.body;
  r = curl(port, "POST", "/v1/domains/" + d + "_nope/commands", admin_token,
           R"({"type": "Test"})");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_TRUE(has(r.body, "unknown_domain")) << r.body;
  EXPECT_EQ(curl(port, "GET", "/v2/nothing", token).status, 404);

  // Bad input never reaches the database.
  auto bad_id = new_uuid();
  r = curl(port, "POST", commands, token,
           R"({"type": "Test", "command_id": ")" + bad_id
             + R"(", "colour": "red"})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(has(r.body, R"(unknown field \"colour\")")) << r.body;
  EXPECT_EQ(curl(port, "POST", commands, token, "{not json").status, 400);
  EXPECT_EQ(curl(port, "GET", commands + "/nope", token).status, 400);
  EXPECT_EQ(
    curl(port, "GET", commands + "/" + ok_id + "?wait=5min", token).status,
    400);
  r = curl(port, "POST", commands, token, std::string(300 * 1024, ' '));
  EXPECT_EQ(r.status, 413);
  EXPECT_TRUE(has(r.body, R"("code":"payload_too_large")")) << r.body;
  EXPECT_EQ(commands_with_id(d, bad_id), 0);

  // A batch, in one transaction.
  r = curl(port, "POST", "/v1/domains/" + d + "/batches", token,
           R"({"name": "two", "commands": [{"type": "Test"},
               {"type": "Test", "data": {"behavior": {"outcome": "success"}}}]})");
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_TRUE(has(r.body, R"("total":2)")) << r.body;

  // The C++ path: `cmdbus send --wait` (command_bus::send_and_wait), its
  // exit code saying how the command ended.
  auto send_wait = [&](const std::string& data, const std::string& extra) {
    std::vector<std::string> args{"send",   d,     "Test",  "--data", data,
                                  "--wait", "20s", "--dsn", dsn()};
    if (!extra.empty())
      args.insert(args.end(), {extra, "1h", "--wait", "300ms"});
    return run_cmdbus(args);
  };
  auto done = send_wait(R"({"behavior": {"outcome": "success"}})", "");
  EXPECT_EQ(done.exit_code, 0) << done.out << done.err;
  EXPECT_TRUE(has(done.out, "COMPLETED")) << done.out;
  auto no = send_wait(R"({"behavior": {"outcome": "business_rule"}})", "");
  EXPECT_EQ(no.exit_code, 5) << no.out << no.err;
  EXPECT_TRUE(has(no.out, "FAILED (BUSINESS_RULE DEMO_BUSINESS_RULE"))
    << no.out;
  auto pending = send_wait("{}", "--delay");
  EXPECT_EQ(pending.exit_code, 7) << pending.out << pending.err;
  EXPECT_TRUE(has(pending.out, "PENDING after 300 ms")) << pending.out;
}

TEST(Api, AnswersServiceUnavailableWhileTheDatabaseIsCutAndComesBack) {
  auto d = unique_name("apicut");
  create_queue(d);
  auto c = connect();
  auto pg_port = c.query("SELECT current_setting('port')");
  tcp_proxy proxy{std::stoi(std::string{pg_port.text(0, 0)})};
  api::api_settings s;
  s.listen = {"127.0.0.1", 0};
  s.dsn = dsn() + " host=127.0.0.1 port=" + std::to_string(proxy.port());
  s.tokens = api::token_store::parse(tokens_for(d), "test");
  s.threads = 2;
  api::command_api server{s};
  httplib::Client http{"127.0.0.1", server.port()};
  http.set_read_timeout(20, 0);
  httplib::Headers auth{{"Authorization", "Bearer " + token}};
  auto path = "/v1/domains/" + d + "/commands";
  auto post = [&](const std::string& id) {
    return http.Post(path.c_str(), auth,
                     R"({"type": "T", "command_id": ")" + id + "\"}",
                     "application/json");
  };
  std::vector<std::string> acknowledged;
  auto first = new_uuid();
  auto res = post(first);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  acknowledged.push_back(first);

  proxy.cut();
  // Every request that needs the database hears 503 with a JSON error,
  // at once (no hanging), while health is still answered.
  std::string body;
  ASSERT_TRUE(eventually(
    [&] {
      auto id = new_uuid();
      auto r = post(id);
      if (r && r->status == 201)
        acknowledged.push_back(id);
      body = r ? r->body : "";
      return r && r->status == 503;
    },
    15s))
    << body;
  EXPECT_TRUE(has(body, R"("code":"database_unavailable")")) << body;
  auto get = http.Get((path + "/" + first + "?wait=0").c_str(), auth);
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 503);
  EXPECT_EQ(get->get_header_value("Retry-After"), "1");
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  proxy.restore();
  // Back by itself once the database is reachable again.
  ASSERT_TRUE(eventually(
    [&] {
      auto id = new_uuid();
      auto r = post(id);
      if (r && r->status == 201)
        acknowledged.push_back(id);
      return r && r->status == 201;
    },
    15s));
  for (auto& id : acknowledged)
    EXPECT_EQ(commands_with_id(d, id), 1) << id;
  EXPECT_GE(server.stats().unavailable, 2u);
  EXPECT_EQ(server.stats().undeclared, 0u);
}

TEST(Api, AWaitWhoseClientWentAwayFreesItsThread) {
  auto d = unique_name("apigone");
  create_queue(d);
  api::api_settings s;
  s.listen = {"127.0.0.1", 0};
  s.dsn = dsn();
  s.tokens = api::token_store::parse(tokens_for(d), "test");
  // One thread: while a GET waits, nothing else is answered.
  s.threads = 1;
  api::command_api server{s};
  httplib::Client http{"127.0.0.1", server.port()};
  http.set_read_timeout(10, 0);
  httplib::Headers auth{{"Authorization", "Bearer " + token}};
  auto path = "/v1/domains/" + d + "/commands";
  auto id = new_uuid();
  auto res = http.Post(path.c_str(), auth,
                       R"({"type": "T", "delay": "1h", "command_id": ")" + id
                         + "\"}",
                       "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201);
  // A client asks to wait 30 s for the command (due in an hour) and
  // leaves.
  int fd = connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  std::string request = "GET " + path + "/" + id
                        + "?wait=30s HTTP/1.1\r\nHost: x\r\nAuthorization: "
                          "Bearer "
                        + token + "\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  // Health is answered meanwhile (a thread of its own).
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  ::close(fd);
  // The next request is answered well before those 30 s.
  auto next = http.Post(path.c_str(), auth, R"({"type": "T"})",
                        "application/json");
  ASSERT_TRUE(next) << "no answer within 10 s: the thread still waits";
  EXPECT_EQ(next->status, 201);
}

TEST(Api, KillNineLosesNoAcknowledgedCommandAndARetrySendsEachOnce) {
  auto d = unique_name("apikill");
  create_queue(d);
  std::vector<std::string> ids;
  for (int i = 0; i < 250; ++i)
    ids.push_back(new_uuid());
  std::map<std::string, int> answers;
  {
    api_process api{tokens_for(d)};
    ASSERT_TRUE(api.serving());
    std::mutex mtx;
    std::atomic<size_t> next{0};
    std::atomic<size_t> acked{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 4; ++t)
      clients.emplace_back([&] {
        httplib::Client http{"127.0.0.1", api.port};
        http.set_read_timeout(5, 0);
        httplib::Headers auth{{"Authorization", "Bearer " + token}};
        for (size_t i = next++; i < ids.size(); i = next++) {
          auto r = http.Post(("/v1/domains/" + d + "/commands").c_str(), auth,
                             R"({"type": "T", "command_id": ")" + ids[i]
                               + "\"}",
                             "application/json");
          if (!r)
            continue;
          std::lock_guard<std::mutex> guard{mtx};
          answers[ids[i]] = r->status;
          if (r->status == 201)
            ++acked;
        }
      });
    // Killed in the middle of the load.
    EXPECT_TRUE(eventually([&] { return acked.load() >= 50; }, 20s));
    api.proc.signal(SIGKILL);
    for (auto& t : clients)
      t.join();
  }
  size_t acked = 0;
  for (auto& [id, status] : answers)
    if (status == 201) {
      ++acked;
      EXPECT_EQ(commands_with_id(d, id), 1) << id;
    }
  EXPECT_GE(acked, 50u);
  EXPECT_LT(acked, ids.size()) << "the kill came after the load";
  // The client sends everything again: what was sent is a repeat (200),
  // the rest is sent now; each command exists once.
  api_process again{tokens_for(d)};
  ASSERT_TRUE(again.serving());
  httplib::Client http{"127.0.0.1", again.port};
  httplib::Headers auth{{"Authorization", "Bearer " + token}};
  for (auto& id : ids) {
    auto r = http.Post(("/v1/domains/" + d + "/commands").c_str(), auth,
                       R"({"type": "T", "command_id": ")" + id + "\"}",
                       "application/json");
    ASSERT_TRUE(r);
    if (answers.count(id) > 0 && answers[id] == 201)
      EXPECT_EQ(r->status, 200) << id;
    else
      EXPECT_TRUE(r->status == 200 || r->status == 201) << r->status;
  }
  auto c = connect();
  EXPECT_EQ(c.query("SELECT count(*) FROM commandbus.command WHERE domain "
                    "= $1",
                    d)
              .int64(0, 0),
            static_cast<int64_t>(ids.size()));
}
