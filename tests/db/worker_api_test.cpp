// `cmdbus worker --api ADDR:PORT` ([api] in its config file): the worker
// process also serves the command API. A command sent through it and
// awaited is completed by that same worker's handler (the only one of its
// domain); the [api] section of a config file with the worker's [tls] set
// serves HTTPS with client certificates; a worker asked for the API
// without tokens refuses to start; SIGTERM stops both.

#include <gtest/gtest.h>

#include <string>

#include <sys/stat.h>

#include "tests/db/api_tls_support.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

using api_tls::has;
using api_tls::reply;
using api_tls::run_curl;

const std::string token = "tok_worker_0123456789";

/// A request over plain HTTP to 127.0.0.1:PORT.
reply http(int port, const std::string& method, const std::string& path,
           const std::string& tok,
           const std::optional<std::string>& body = std::nullopt) {
  return run_curl({"/usr/bin/curl", "-s", "-i", "--max-time", "40", "-X", method,
                   "http://127.0.0.1:" + std::to_string(port) + path},
                  tok, body);
}

/// A command of the demo handler that completes with {"by": "this"}.
std::string completing(const std::string& domain, const std::string& id) {
  return R"({"type": "Test", "command_id": ")" + id + R"(", "reply_to": ")"
         + domain
         + R"(_replies", "data": {"behavior": {"outcome": "success",
         "result": {"by": "this"}}}})";
}

} // namespace

TEST(WorkerApi, ServesSendAndWaitBesideItself) {
  auto d = unique_name("wapi");
  int port = free_port();
  background_cmdbus worker{{"worker", "--demo", "--domain", d, "--create",
                            "--dsn", dsn(), "--api",
                            "127.0.0.1:" + std::to_string(port)},
                           {"CMDBUS_API_TOKENS=" + token + " " + d}};
  ASSERT_TRUE(eventually(
    [&] { return http(port, "GET", "/healthz", "").status == 200; }, 20s));
  auto commands = "/v1/domains/" + d + "/commands";
  auto id = new_uuid();
  EXPECT_EQ(http(port, "POST", commands, "", completing(d, id)).status, 401);
  auto r = http(port, "POST", commands, token, completing(d, id));
  ASSERT_EQ(r.status, 201) << r.body;
  // No other worker serves this domain: the worker that took the request
  // ran its handler.
  r = http(port, "GET", commands + "/" + id + "?wait=20s", token);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(has(r.body, R"("status":"COMPLETED")")) << r.body;
  EXPECT_TRUE(has(r.body, R"("result":{"by":"this"})")) << r.body;
  // SIGTERM stops both, cleanly.
  auto stopped = worker.stop();
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->exit_code, 0) << stopped->err;
  EXPECT_TRUE(has(stopped->err, "command API on http://127.0.0.1:"))
    << stopped->err;
  EXPECT_TRUE(has(stopped->err, "the command API has stopped"))
    << stopped->err;
  EXPECT_NE(http(port, "GET", "/healthz", "").status, 200);
}

TEST(WorkerApi, AConfigFileApiSectionServesHttpsWithTheWorkersTlsSet) {
  api_tls::certificates certs;
  temp_dir dir;
  auto d = unique_name("wapitls");
  int port = free_port();
  auto tokens = dir.write("tokens", token + " " + d + "\n");
  ASSERT_EQ(::chmod(tokens.c_str(), 0600), 0);
  auto ini = dir.write(
    "worker.ini",
    "[worker]\ndomains = [\"" + d + "\"]\n[api]\nlisten = \"127.0.0.1:"
      + std::to_string(port) + "\"\ntokens-file = \"" + tokens
      + "\"\nthreads = 2\n[tls]\ncertificate = \"" + certs.pem("localhost")
      + "\"\nkey = \"" + certs.key("localhost") + "\"\nca-file = \""
      + certs.pem("ca") + "\"\n");
  background_cmdbus worker{
    {"worker", "--demo", "--create", "--dsn", dsn(), "--config", ini}};
  ASSERT_TRUE(eventually(
    [&] {
      return api_tls::https(certs, port, "GET", "/healthz", "", std::nullopt,
                            "client")
               .status
             == 200;
    },
    20s));
  auto commands = "/v1/domains/" + d + "/commands";
  auto id = new_uuid();
  auto r = api_tls::https(certs, port, "POST", commands, token,
                          completing(d, id), "client");
  ASSERT_EQ(r.status, 201) << r.curl_exit << r.body;
  r = api_tls::https(certs, port, "GET", commands + "/" + id + "?wait=20s",
                     token, std::nullopt, "client");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(has(r.body, R"("result":{"by":"this"})")) << r.body;
  // The worker's set has a CA: clients without a certificate are refused.
  auto without = api_tls::https(certs, port, "GET", "/healthz", "");
  EXPECT_EQ(without.status, 0);
  EXPECT_NE(without.curl_exit, 0);
  auto stopped = worker.stop();
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->exit_code, 0) << stopped->err;
  EXPECT_TRUE(has(stopped->err, "TLS with client certificates"))
    << stopped->err;
}

TEST(WorkerApi, RefusesToStartWithoutTokens) {
  auto d = unique_name("wapinotok");
  auto r = run_cmdbus({"worker", "--demo", "--domain", d, "--create", "--dsn",
                       dsn(), "--api", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "the command API needs tokens")) << r.err;
  EXPECT_TRUE(has(r.err, "--api-tokens-file")) << r.err;
}
