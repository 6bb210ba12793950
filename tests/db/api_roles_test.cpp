// The command API connected as the operator role of `cmdbus grant`
// (docs/api.md, "Where it runs"; docs/operations.md, "Roles"): every
// operation it serves, and each of its database paths, works with that
// role's rights and no more: sends with and without the client's id (the
// fingerprint written, then read for a repeat and a conflict), a repeat of
// an id the CLI sent (compared with the command's message in the queue),
// a new reply queue (created through the owner's function), a batch, and
// waits for commands that a worker, as the worker role, completes (the
// result read from the reply queue) or fails.

#include <gtest/gtest.h>

#include <httplib.h>

#include "api/command_api.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/db/roles_env.hpp"
#include "tests/support/sql_checks.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

const std::string token = "tok_roles_0123456789";

bool has(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

} // namespace

TEST(ApiRoles, TheOperatorRoleServesEveryOperation) {
  roles_env env;
  auto r = env.grant();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto domain = unique_name("ard");
  auto as_op = env.dsn_as(env.operator_login);
  r = roles_env::cli({"queues", "--create", domain + "__commands"}, as_op);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  api::api_settings s;
  s.listen = {"127.0.0.1", 0};
  s.dsn = as_op;
  s.tokens = api::token_store::parse(token + " " + domain, "test");
  api::command_api server{s};
  httplib::Client http{"127.0.0.1", server.port()};
  http.set_read_timeout(30, 0);
  httplib::Headers auth{{"Authorization", "Bearer " + token}};
  auto commands = "/v1/domains/" + domain + "/commands";
  auto post = [&](const std::string& path, const std::string& body) {
    auto res = http.Post(path.c_str(), auth, body, "application/json");
    return res ? std::make_pair(res->status, res->body)
               : std::make_pair(0, std::string{"no answer"});
  };
  auto get = [&](const std::string& id) {
    auto res = http.Get((commands + "/" + id + "?wait=25s").c_str(), auth);
    return res ? std::make_pair(res->status, res->body)
               : std::make_pair(0, std::string{"no answer"});
  };

  // A send without an id, one with an id and a reply queue that does not
  // exist yet, its repeat, and a conflict.
  auto a = post(commands, R"({"type": "Test"})");
  EXPECT_EQ(a.first, 201) << a.second;
  auto ok_id = new_uuid();
  auto ok = R"({"type": "Test", "command_id": ")" + ok_id
            + R"(", "reply_to": ")" + domain + R"(__replies", "data":
              {"behavior": {"outcome": "success", "result": {"ok": 1}}}})";
  a = post(commands, ok);
  EXPECT_EQ(a.first, 201) << a.second;
  a = post(commands, ok);
  EXPECT_EQ(a.first, 200) << a.second;
  a = post(commands, R"({"type": "Other", "command_id": ")" + ok_id + "\"}");
  EXPECT_EQ(a.first, 409) << a.second;

  // An id the CLI sent (no fingerprint): compared with its message, in the
  // queue while no worker runs.
  r = roles_env::cli({"send", domain, "Test", "--data",
                      R"({"behavior": {"outcome": "business_rule"}})",
                      "--json"},
                     as_op);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto cli_id = jget(env.owner, r.out, "{command_id}").value_or("");
  a = post(commands, R"({"type": "Test", "command_id": ")" + cli_id
                       + R"(", "data": {"behavior": {"outcome":
                           "business_rule"}}})");
  EXPECT_EQ(a.first, 200) << a.second;
  a = post(commands, R"({"type": "Test", "command_id": ")" + cli_id
                       + R"(", "data": {}})");
  EXPECT_EQ(a.first, 409) << a.second;

  // A batch with ids of the client's.
  a = post("/v1/domains/" + domain + "/batches",
           R"({"commands": [{"type": "Test", "command_id": ")" + new_uuid()
             + R"("}, {"type": "Test"}]})");
  EXPECT_EQ(a.first, 201) << a.second;

  // Waits, while a worker as the worker role runs the commands: completed
  // with the result from the reply queue, and failed.
  background_cmdbus worker{{"worker", "--demo", "--domain", domain, "--dsn",
                            env.dsn_as(env.worker_login), "--poll-interval",
                            "100ms", "--quiet"}};
  auto done = get(ok_id);
  EXPECT_EQ(done.first, 200) << done.second;
  EXPECT_TRUE(has(done.second, R"("result":{"ok":1})")) << done.second;
  auto failed = get(cli_id);
  EXPECT_EQ(failed.first, 422) << failed.second;
  EXPECT_EQ(server.stats().undeclared, 0u);
  // The fingerprints of the two ids the client chose (the send's and the
  // batch command's) were written as the operator.
  EXPECT_EQ(*scalar(env.owner,
                    "SELECT count(*)::text FROM commandbus.cmdbus_api_request "
                    "WHERE domain = $1",
                    domain),
            "2");
}
