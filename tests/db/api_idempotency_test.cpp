// Idempotent sends of the command API (docs/api.md, "Idempotency"): a POST
// with the client's command_id records the fingerprint of what it decided
// (commandbus.cmdbus_api_request, V017) in the send's transaction, and a
// repeat is compared with it whatever became of the command: a completed
// command (its message deleted) with another payload is a conflict, the
// same request with its keys in another order a repeat; commands sent by
// the library have no fingerprint and are compared as before; a batch's
// commands are recorded too; two concurrent POSTs of one id give one 201
// and one 200 (the same request) or one 409 (different ones); and `cmdbus
// prune` removes the fingerprints with their commands.

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include <httplib.h>

#include "api/command_api.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

const std::string token = "tok_idem_0123456789";

bool has(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

/// A command API in this process on a domain whose queue exists.
struct api_env {
  std::string domain = unique_name("apiid");
  /// The API's application_name: its backends, and no other test's.
  std::string app = unique_name("apiid");
  std::unique_ptr<api::command_api> server;

  api_env() {
    auto c = connect();
    c.query("SELECT pgmq.create($1)", db::command_queue(domain));
    api::api_settings s;
    s.listen = {"127.0.0.1", 0};
    s.dsn = dsn() + " application_name=" + app;
    s.tokens = api::token_store::parse(token + " " + domain, "test");
    server = std::make_unique<api::command_api>(s);
  }

  /// POSTs `body` to `what` ("commands" or "batches"): {status, body}.
  std::pair<int, std::string> post(const std::string& body,
                                   const std::string& what = "commands") {
    httplib::Client http{"127.0.0.1", server->port()};
    http.set_read_timeout(20, 0);
    auto r = http.Post(("/v1/domains/" + domain + "/" + what).c_str(),
                       {{"Authorization", "Bearer " + token}}, body,
                       "application/json");
    if (!r)
      return {0, "no answer"};
    return {r->status, r->body};
  }

  int64_t count(const std::string& sql, const std::string& id) {
    auto c = connect();
    return c.query(sql, domain, id).int64(0, 0);
  }

  int64_t commands(const std::string& id) {
    return count("SELECT count(*) FROM commandbus.command WHERE domain = $1 "
                 "AND command_id = $2::uuid",
                 id);
  }

  int64_t fingerprints(const std::string& id) {
    return count("SELECT count(*) FROM commandbus.cmdbus_api_request WHERE "
                 "domain = $1 AND command_id = $2::uuid",
                 id);
  }

  /// Completes a command as a worker's handler would leave it: COMPLETED,
  /// its message deleted (nothing of its data is left but the fingerprint).
  void complete(const std::string& id) {
    auto c = connect();
    c.query("SELECT pgmq.delete($3, msg_id) FROM commandbus.command WHERE "
            "domain = $1 AND command_id = $2::uuid",
            domain, id, db::command_queue(domain));
    c.query("UPDATE commandbus.command SET status = 'COMPLETED' WHERE "
            "domain = $1 AND command_id = $2::uuid",
            domain, id);
  }

  /// The API connections waiting for a lock (pg_stat_activity).
  int64_t api_waiting_on_locks() {
    auto c = connect();
    return c
      .query("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
             "$1 AND wait_event_type = 'Lock'",
             app)
      .int64(0, 0);
  }

  /// Runs `bodies` as concurrent POSTs that all reach the database while
  /// the domain's queue is locked (each waits for the lock), then lets
  /// them go at once; returns their statuses in order.
  std::vector<int> race(const std::vector<std::string>& bodies) {
    auto lock = connect();
    lock.exec("BEGIN");
    lock.exec("LOCK TABLE pgmq." + db::queue_table(db::command_queue(domain))
              + " IN EXCLUSIVE MODE");
    std::vector<int> statuses(bodies.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < bodies.size(); ++i)
      clients.emplace_back(
        [&, i] { statuses[i] = post(bodies[i]).first; });
    bool lined_up = eventually(
      [&] {
        return api_waiting_on_locks() == static_cast<int64_t>(bodies.size());
      },
      10s);
    lock.exec("COMMIT");
    for (auto& t : clients)
      t.join();
    EXPECT_TRUE(lined_up) << "the POSTs did not all wait for the lock";
    return statuses;
  }
};

std::string body_of(const std::string& id, const std::string& rest) {
  return R"({"command_id": ")" + id + "\", " + rest + "}";
}

} // namespace

TEST(ApiIdempotency, ACompletedCommandIsComparedByItsFingerprint) {
  api_env env;
  auto id = new_uuid();
  auto sent = body_of(id, R"("type": "Pay", "data": {"amount": 5, "to": "x"},
                             "delay": "90s", "priority": 2)");
  auto r = env.post(sent);
  ASSERT_EQ(r.first, 201) << r.second;
  EXPECT_EQ(env.fingerprints(id), 1);
  env.complete(id);

  // The same request, its keys in another order, other white space and
  // the delay in other units: a repeat, answered with the command's state.
  r = env.post(body_of(id, R"("priority": 2, "delay": "1.5m",
      "data": {"to": "x",   "amount": 5}, "type": "Pay")"));
  EXPECT_EQ(r.first, 200) << r.second;
  EXPECT_TRUE(has(r.second, R"("created":false)")) << r.second;
  EXPECT_TRUE(has(r.second, R"("status":"COMPLETED")")) << r.second;

  // Anything it decided otherwise: a conflict naming the id, although the
  // command's message (its data and priority) is gone.
  for (auto& other :
       {R"("type": "Pay", "data": {"amount": 6, "to": "x"}, "delay": "90s",
           "priority": 2)",
        R"("type": "Pay", "data": {"amount": 5, "to": "x"}, "delay": "90s",
           "priority": 3)",
        R"("type": "Pay", "data": {"amount": 5, "to": "x"}, "delay": "91s",
           "priority": 2)",
        R"("type": "Pay", "data": {"amount": 5, "to": "x"}, "priority": 2)",
        R"("type": "Pay", "data": {"amount": 5, "to": "x"}, "delay": "90s",
           "priority": 2, "max_attempts": 3)"}) {
    r = env.post(body_of(id, other));
    EXPECT_EQ(r.first, 409) << other << "\n" << r.second;
    EXPECT_TRUE(has(r.second, "command_id " + id)) << r.second;
    EXPECT_TRUE(has(r.second, "first used by a different request"))
      << r.second;
  }
  EXPECT_EQ(env.commands(id), 1);
}

TEST(ApiIdempotency, ALibraryCommandIsComparedAsBeforeAndABatchIsRecorded) {
  api_env env;
  db::pool_options opts;
  opts.dsn = dsn();
  db::pool pool{opts};
  command_bus bus{pool};
  // Sent by the library: no fingerprint; a POST of its id is compared with
  // the command (type, and data while its message is kept).
  send_request req;
  req.domain = env.domain;
  req.command_type = "Pay";
  req.command_id = uuid::random();
  req.data = json::parse(R"({"amount": 5})");
  bus.send(req);
  auto id = req.command_id.to_string();
  auto r = env.post(body_of(id, R"("type": "Pay", "data": {"amount": 5})"));
  EXPECT_EQ(r.first, 200) << r.second;
  r = env.post(body_of(id, R"("type": "Pay", "data": {"amount": 6})"));
  EXPECT_EQ(r.first, 409) << r.second;
  r = env.post(body_of(id, R"("type": "Refund", "data": {"amount": 5})"));
  EXPECT_EQ(r.first, 409) << r.second;
  EXPECT_EQ(env.fingerprints(id), 0);

  // A batch's commands with the client's ids have fingerprints; one of
  // them POSTed alone is another request (it came in a batch): 409.
  auto a = new_uuid();
  auto b = new_uuid();
  r = env.post(R"({"commands": [)" + body_of(a, R"("type": "Pay")") + ", "
                 + body_of(b, R"("type": "Pay")") + R"(, {"type": "Pay"}]})",
               "batches");
  ASSERT_EQ(r.first, 201) << r.second;
  EXPECT_EQ(env.fingerprints(a), 1);
  EXPECT_EQ(env.fingerprints(b), 1);
  r = env.post(body_of(a, R"("type": "Pay")"));
  EXPECT_EQ(r.first, 409) << r.second;
  // The batch again: its ids exist (batches are created whole, once).
  r = env.post(R"({"commands": [)" + body_of(a, R"("type": "Pay")") + "]}",
               "batches");
  EXPECT_EQ(r.first, 409) << r.second;
  EXPECT_EQ(env.commands(a), 1);
}

TEST(ApiIdempotency, ConcurrentPostsOfOneIdSendItOnce) {
  api_env env;
  for (int round = 0; round < 3; ++round) {
    // The same request twice at once: one 201, one 200.
    auto id = new_uuid();
    auto same = body_of(id, R"("type": "Pay", "data": {"n": 1})");
    auto statuses = env.race({same, same});
    std::sort(statuses.begin(), statuses.end());
    EXPECT_EQ(statuses, (std::vector<int>{200, 201})) << "round " << round;
    EXPECT_EQ(env.commands(id), 1);
    EXPECT_EQ(env.fingerprints(id), 1);

    // Two different requests with one id at once: one 201, one 409, and
    // the command is the one that was answered 201.
    id = new_uuid();
    std::vector<std::string> bodies{
      body_of(id, R"("type": "Pay", "data": {"n": 1})"),
      body_of(id, R"("type": "Refund", "data": {"n": 1})")};
    statuses = env.race(bodies);
    ASSERT_EQ(statuses.size(), 2u);
    EXPECT_TRUE((statuses[0] == 201 && statuses[1] == 409)
                || (statuses[0] == 409 && statuses[1] == 201))
      << statuses[0] << " " << statuses[1];
    EXPECT_EQ(env.commands(id), 1);
    auto winner = statuses[0] == 201 ? "Pay" : "Refund";
    EXPECT_EQ(env.count("SELECT count(*) FROM commandbus.command WHERE "
                        "domain = $1 AND command_id = $2::uuid AND "
                        "command_type = '"
                          + std::string{winner} + "'",
                        id),
              1);
    // The one answered 201 is the one a repeat matches.
    EXPECT_EQ(env.post(bodies[statuses[0] == 201 ? 0 : 1]).first, 200);
  }
}

TEST(ApiIdempotency, PruneRemovesTheFingerprintsWithTheirCommands) {
  api_env env;
  auto old_id = new_uuid();
  auto kept_id = new_uuid();
  auto old_body = body_of(old_id, R"("type": "Pay")");
  ASSERT_EQ(env.post(old_body).first, 201);
  ASSERT_EQ(env.post(body_of(kept_id, R"("type": "Pay")")).first, 201);
  env.complete(old_id);
  {
    auto c = connect();
    c.query("UPDATE commandbus.command SET updated_at = now() - interval "
            "'40 days' WHERE domain = $1 AND command_id = $2::uuid",
            env.domain, old_id);
  }
  auto prune = [&](bool dry) {
    std::vector<std::string> args{"prune", "--domain", env.domain,
                                  "--older-than", "30d", "--json",
                                  "--dsn", dsn()};
    if (dry)
      args.push_back("--dry-run");
    return run_cmdbus(args);
  };
  auto dry = prune(true);
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_TRUE(has(dry.out, R"("api_requests":1)")) << dry.out;
  EXPECT_EQ(env.fingerprints(old_id), 1);
  auto done = prune(false);
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_TRUE(has(done.out, R"("commands":1)")) << done.out;
  EXPECT_TRUE(has(done.out, R"("api_requests":1)")) << done.out;
  EXPECT_EQ(env.fingerprints(old_id), 0);
  EXPECT_EQ(env.commands(old_id), 0);
  // The pending one keeps its fingerprint.
  EXPECT_EQ(env.fingerprints(kept_id), 1);
  // Its id is free again: a POST sends it anew.
  EXPECT_EQ(env.post(old_body).first, 201);
  EXPECT_EQ(env.fingerprints(old_id), 1);
}
