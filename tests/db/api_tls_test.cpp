// The command API over TLS (api_settings::tls, `cmdbus api --tls-*`):
// curl sends and waits over HTTPS with a test CA while the demo worker
// runs the commands, and hears the same 401 and 403 as over plain HTTP;
// with a CA file the API requires client certificates that CA signed; and
// the faults of the plain listener, over TLS: connections that never
// finish their handshake (nothing, or half a ClientHello) are closed at the
// request deadline while /healthz over TLS is answered; a plain HTTP
// request on the TLS port is refused and counted; a cut database answers
// 503 to a TLS client and the API comes back by itself; a TLS client
// stopped with SIGSTOP while its answer is pending holds nobody else, and
// one that leaves while its GET waits frees the thread. `cmdbus api`
// refuses a partial TLS set, a key of another certificate and no tokens.

#include <gtest/gtest.h>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include "api/command_api.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "tests/db/api_tls_support.hpp"
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

using api_tls::certificates;
using api_tls::has;
using api_tls::https;
using api_tls::https_args;
using api_tls::run_curl;

const std::string token = "tok_orders_0123456789";
const std::string other_token = "tok_other_0123456789";

std::string tokens_for(const std::string& domain) {
  return token + " " + domain + ";" + other_token + " elsewhere";
}

int64_t commands_with_id(const std::string& domain, const std::string& id) {
  auto c = connect();
  return c
    .query("SELECT count(*) FROM commandbus.command WHERE domain = $1 AND "
           "command_id = $2::uuid",
           domain, id)
    .int64(0, 0);
}

void create_queue(const std::string& domain) {
  auto c = connect();
  c.query("SELECT pgmq.create($1)", db::command_queue(domain));
}

bool queue_exists(const std::string& domain) {
  auto c = connect();
  return db::queue_exists(c, db::command_queue(domain));
}

/// An API in this process over TLS, on a free loopback port.
api::api_settings tls_settings(const certificates& certs, bool mutual,
                               const std::string& domain, size_t threads = 2) {
  api::api_settings s;
  s.listen = {"127.0.0.1", 0};
  s.dsn = dsn();
  s.tokens = api::token_store::parse(tokens_for(domain), "test");
  s.threads = threads;
  s.tls = certs.server(mutual);
  return s;
}

/// The first bytes of a TLS 1.2 ClientHello (a record header announcing
/// 512 bytes and the start of the handshake message): a handshake that
/// never gets the rest.
const std::string half_client_hello{
  "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11};

// POSTs a command to `path` that is due in an hour over HTTPS, so that a
// wait for it lasts as long as the client allows; returns its id.
std::string post_due_in_an_hour(const certificates& certs, int port,
                                const std::string& path) {
  auto id = new_uuid();
  EXPECT_EQ(
    https(certs, port, "POST", path, token,
          R"({"type": "T", "delay": "1h", "command_id": ")" + id + "\"}")
      .status,
    201);
  return id;
}

} // namespace

TEST(ApiTls, SendsAndWaitsOverHttpsAndRefusesBadTokens) {
  certificates certs;
  auto d = unique_name("apitls");
  background_cmdbus worker{
    {"worker", "--demo", "--domain", d, "--create", "--dsn", dsn()}};
  ASSERT_TRUE(eventually([&] { return queue_exists(d); }, 15s));
  int port = free_port();
  background_cmdbus api{{"api", "--listen", "127.0.0.1:" + std::to_string(port),
                         "--dsn", dsn(), "--tls-certificate",
                         certs.pem("localhost"), "--tls-key",
                         certs.key("localhost")},
                        {"CMDBUS_API_TOKENS=" + tokens_for(d)}};
  ASSERT_TRUE(eventually(
    [&] { return https(certs, port, "GET", "/healthz", "").status == 200; },
    15s));
  auto commands = "/v1/domains/" + d + "/commands";
  auto id = new_uuid();
  auto body = R"({"type": "Test", "command_id": ")" + id + R"(", "reply_to": ")"
              + d + R"(_replies", "data": {"behavior": {"outcome": "success",
              "result": {"total": 7}}}})";

  // The tokens are checked over TLS as over plain HTTP.
  auto r = https(certs, port, "POST", commands, "", body);
  EXPECT_EQ(r.status, 401) << r.curl_exit << r.body;
  EXPECT_TRUE(has(r.headers, "WWW-Authenticate: Bearer")) << r.headers;
  EXPECT_EQ(
    https(certs, port, "POST", commands, "not_a_token_at_all_x", body).status,
    401);
  r = https(certs, port, "POST", commands, other_token, body);
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(commands_with_id(d, id), 0);

  // Sent, and waited for until the worker has completed it.
  r = https(certs, port, "POST", commands, token, body);
  ASSERT_EQ(r.status, 201) << r.curl_exit << r.body;
  r = https(certs, port, "GET", commands + "/" + id + "?wait=20s", token);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(has(r.body, R"("status":"COMPLETED")")) << r.body;
  EXPECT_TRUE(has(r.body, R"("result":{"total":7})")) << r.body;
  EXPECT_EQ(commands_with_id(d, id), 1);

  // A client that does not trust the API's CA refuses it (curl: 60, the
  // certificate cannot be verified).
  auto untrusting = https_args(certs, port, "GET", "/healthz");
  untrusting[8] = certs.pem("other_ca");
  EXPECT_EQ(run_curl(untrusting, "").curl_exit, 60);

  // Plain HTTP on the TLS port: refused, with a word on what to use.
  auto plain = run_process(
    {"/usr/bin/curl", "-s", "-i", "--max-time", "10",
     "http://127.0.0.1:" + std::to_string(port) + "/healthz"});
  EXPECT_TRUE(has(plain.out, "HTTP/1.1 400")) << plain.out;
  EXPECT_TRUE(has(plain.out, "HTTPS")) << plain.out;
  // The API still serves HTTPS.
  EXPECT_EQ(https(certs, port, "GET", "/healthz", "").status, 200);
  auto stopped = api.stop();
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->exit_code, 0) << stopped->err;
  EXPECT_TRUE(has(stopped->err, "command API on https://127.0.0.1:"))
    << stopped->err;
}

TEST(ApiTls, RequiresClientCertificatesOfItsCa) {
  certificates certs;
  auto d = unique_name("apimtls");
  create_queue(d);
  api::command_api server{tls_settings(certs, true, d)};
  auto port = server.port();
  auto ok = https(certs, port, "POST", "/v1/domains/" + d + "/commands", token,
                  R"({"type": "T"})", "client");
  EXPECT_EQ(ok.status, 201) << ok.curl_exit << ok.body;
  // No certificate, or one of another CA: no handshake, no answer (the
  // token would be right).
  auto without = https(certs, port, "GET", "/healthz", token);
  EXPECT_EQ(without.status, 0) << without.headers;
  EXPECT_NE(without.curl_exit, 0);
  auto stranger = https(certs, port, "GET", "/healthz", token, std::nullopt,
                        "stranger");
  EXPECT_EQ(stranger.status, 0) << stranger.headers;
  EXPECT_NE(stranger.curl_exit, 0);
  // Counted by the server's thread once it gives up on the handshake,
  // which may be after the client has already exited (failed once in CI:
  // 1 counted of 2).
  EXPECT_TRUE(eventually(
    [&] { return server.stats().listener.handshakes_failed >= 2u; }, 10s))
    << server.stats().listener.handshakes_failed << " failed handshakes";
  // The token still counts with a good certificate.
  auto forbidden = https(certs, port, "POST", "/v1/domains/" + d + "/commands",
                         other_token, R"({"type": "T"})", "client");
  EXPECT_EQ(forbidden.status, 403) << forbidden.body;
  EXPECT_EQ(server.stats().undeclared, 0u);
}

TEST(ApiTls, StalledHandshakesAreClosedAtTheDeadlineWhileHealthIsAnswered) {
  certificates certs;
  auto d = unique_name("apistall");
  api::command_api server{tls_settings(certs, false, d)};
  auto port = server.port();
  {
    // Connections that send nothing, and ones that send half a
    // ClientHello, then wait; reopened whenever closed.
    hanging_clients silent{port, 8, ""};
    hanging_clients half{port, 8, half_client_hello};
    ASSERT_TRUE(eventually(
      [&] { return silent.opened() >= 8 && half.opened() >= 8; }, 10s));
    // Health over TLS is answered meanwhile, again and again.
    for (int i = 0; i < 3; ++i) {
      auto r = https(certs, port, "GET", "/healthz", "");
      EXPECT_EQ(r.status, 200) << r.curl_exit;
    }
    // Each kind is closed at the request deadline (5 s), without an
    // answer: no handshake, nothing can be said.
    ASSERT_TRUE(eventually(
      [&] {
        return silent.closed_by_server() >= 8 && half.closed_by_server() >= 8;
      },
      30s))
      << silent.closed_by_server() << " " << half.closed_by_server();
    EXPECT_EQ(silent.answered(), 0u);
    EXPECT_EQ(half.answered(), 0u);
    EXPECT_GE(server.stats().listener.timed_out, 16u);
    EXPECT_EQ(https(certs, port, "GET", "/healthz", "").status, 200);
  }
  // A plain HTTP request on the TLS port: refused at once, counted.
  int fd = connect_loopback(port);
  ASSERT_GE(fd, 0);
  std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  auto said = await_close(fd, 10s);
  ::close(fd);
  ASSERT_TRUE(said) << "still open";
  EXPECT_EQ(said->rfind("HTTP/1.1 400", 0), 0u) << *said;
  EXPECT_GE(server.stats().listener.plain_http, 1u);
  // Every descriptor is given back once the clients are gone.
  EXPECT_TRUE(
    eventually([&] { return server.stats().listener.open == 0; }, 10s))
    << server.stats().listener.open;
}

TEST(ApiTls, ACutDatabaseAnswersServiceUnavailableOverTlsAndComesBack) {
  certificates certs;
  auto d = unique_name("apitlscut");
  create_queue(d);
  auto c = connect();
  auto pg_port = c.query("SELECT current_setting('port')");
  tcp_proxy proxy{std::stoi(std::string{pg_port.text(0, 0)})};
  auto s = tls_settings(certs, true, d);
  s.dsn = dsn() + " host=127.0.0.1 port=" + std::to_string(proxy.port());
  api::command_api server{s};
  auto port = server.port();
  auto path = "/v1/domains/" + d + "/commands";
  auto id = new_uuid();
  auto r = https(certs, port, "POST", path, token,
                 R"({"type": "T", "delay": "1h", "command_id": ")" + id + "\"}",
                 "client");
  ASSERT_EQ(r.status, 201) << r.curl_exit << r.body;
  // A TLS client waits for the command (due in an hour) while the
  // database goes away under it.
  background_cmdbus waiting{
    [&] {
      auto argv = https_args(certs, port, "GET", path + "/" + id + "?wait=30s",
                             "client");
      argv.erase(argv.begin());
      argv.insert(argv.end(), {"-H", "Authorization: Bearer " + token});
      return argv;
    }(),
    {},
    "/usr/bin/curl"};
  ASSERT_TRUE(
    eventually([&] { return server.stats().listener.requests >= 2; }, 10s));
  proxy.cut();
  auto answer = waiting.wait(40s);
  ASSERT_TRUE(answer) << "the waiting client got no answer";
  EXPECT_TRUE(has(answer->out, "HTTP/1.1 503")) << answer->out;
  EXPECT_TRUE(has(answer->out, R"("code":"database_unavailable")"))
    << answer->out;
  EXPECT_EQ(
    https(certs, port, "GET", "/healthz", "", std::nullopt, "client").status,
    200);
  proxy.restore();
  // Back by itself: the same API, new requests over TLS.
  std::string last;
  ASSERT_TRUE(eventually(
    [&] {
      auto again = https(certs, port, "GET", path + "/" + id + "?wait=0", token,
                         std::nullopt, "client");
      last = again.body;
      return again.status == 202;
    },
    20s))
    << last;
  EXPECT_GE(server.stats().unavailable, 1u);
  EXPECT_EQ(server.stats().undeclared, 0u);
}

TEST(ApiTls, AStoppedTlsClientHoldsNobodyElse) {
  certificates certs;
  auto d = unique_name("apitlsstop");
  create_queue(d);
  // One thread: a request that it answers after the stopped client's
  // shows that the answer to the stopped client did not hold it.
  api::command_api server{tls_settings(certs, false, d, 1)};
  auto port = server.port();
  auto path = "/v1/domains/" + d + "/commands";
  auto id = post_due_in_an_hour(certs, port, path);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // A client waits 2 s for its answer (the command is due in an hour) and
  // is stopped meanwhile: its answer is written while it cannot read.
  auto argv = https_args(certs, port, "GET", path + "/" + id + "?wait=2s");
  argv.erase(argv.begin());
  argv.insert(argv.end(), {"-H", "Authorization: Bearer " + token});
  auto requests = server.stats().listener.requests;
  background_cmdbus stopped{argv, {}, "/usr/bin/curl"};
  ASSERT_TRUE(eventually(
    [&] { return server.stats().listener.requests > requests; }, 10s));
  stopped.signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return stopped.stopped(); }, 10s));
  // Health is answered meanwhile (its own thread); a send is answered by
  // the one thread once the stopped client's answer is written.
  EXPECT_EQ(https(certs, port, "GET", "/healthz", "").status, 200);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(
      https(certs, port, "POST", path, token, R"({"type": "T"})").status, 201);
  // Once it goes on, it reads the answer that waited for it.
  stopped.signal(SIGCONT);
  auto answer = stopped.wait(20s);
  ASSERT_TRUE(answer);
  EXPECT_TRUE(has(answer->out, "HTTP/1.1 202")) << answer->out;
}

TEST(ApiTls, AWaitWhoseTlsClientWentAwayFreesItsThread) {
  certificates certs;
  auto d = unique_name("apitlsgone");
  create_queue(d);
  // One thread: while a GET waits, nothing else but /healthz is answered.
  api::command_api server{tls_settings(certs, false, d, 1)};
  auto port = server.port();
  auto path = "/v1/domains/" + d + "/commands";
  auto id = post_due_in_an_hour(certs, port, path);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // A client asks to wait 30 s for the command (due in an hour) and
  // gives up after 1 s: its connection closes under the waiting thread.
  auto argv = https_args(certs, port, "GET", path + "/" + id + "?wait=30s");
  argv[4] = "1";
  auto gone = run_curl(argv, token);
  EXPECT_EQ(gone.status, 0);
  EXPECT_EQ(gone.curl_exit, 28) << "not the client's own timeout";
  // The next request is answered well before those 30 s (curl gives up
  // after 10).
  auto next = https_args(certs, port, "POST", path);
  next[4] = "10";
  auto r = run_curl(next, token, std::string{R"({"type": "T"})"});
  EXPECT_EQ(r.status, 201) << "no answer within 10 s: the thread still waits";
}

TEST(ApiTls, TheStartRefusesAPartialTlsSetAndFilesItCannotUse) {
  certificates certs;
  auto tokens = "CMDBUS_API_TOKENS=" + tokens_for("x");
  auto start = [&](std::vector<std::string> extra,
                   const std::vector<std::string>& env) {
    std::vector<std::string> args{"api", "--listen", "127.0.0.1:0", "--dsn",
                                  dsn()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cmdbus(args, env);
  };
  // A certificate without its key: a usage error naming what is missing.
  auto r = start({"--tls-certificate", certs.pem("localhost")}, {tokens});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "missing: tls-key")) << r.err;
  // A CA (client certificates) without a certificate of the API's own.
  r = start({}, {tokens, "CMDBUS_TLS_CA_FILE=" + certs.pem("ca")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "missing: tls-certificate, tls-key")) << r.err;
  // A key of another certificate: OpenSSL refuses it, exit code 4.
  r = start({"--tls-certificate", certs.pem("localhost"), "--tls-key",
             certs.key("client")},
            {tokens});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(has(r.err, "does not match the certificate")) << r.err;
  // No tokens: a usage error saying where they come from.
  r = start({"--tls-certificate", certs.pem("localhost"), "--tls-key",
             certs.key("localhost")},
            {});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "the command API needs tokens: --tokens-file"))
    << r.err;
  // The same settings from a config file: [api] and [tls].
  temp_dir dir;
  auto ini = dir.write("api.ini", "[api]\nlisten = \"127.0.0.1:0\"\n[tls]\n"
                                  "certificate = \""
                                    + certs.pem("localhost") + "\"\n");
  r = start({"--config", ini}, {tokens});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "missing: tls-key")) << r.err;
}
