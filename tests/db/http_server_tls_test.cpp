// The listener every HTTP endpoint is served by (actors/ops/http_server.hpp)
// with TLS (use_tls), in this process with routes of the test's own:
// requests on one keep-alive TLS connection, bodies, a key that does not
// match its certificate, and TLS set up after listen(). The faults (stalled
// handshakes, plain HTTP on the TLS port, stopped clients) are tested
// through the command API (api_tls_test.cpp). No database.

#include <gtest/gtest.h>

#include <string>

#include <httplib.h>

#include "cmdbus/actors/ops/http_server.hpp"
#include "tests/support/certificates.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

struct tls_files {
  temp_dir dir;
  tls_files() {
    make_ca(dir.path.string(), "ca");
    make_ca(dir.path.string(), "other");
    make_cert(dir.path.string(), "localhost", "ca");
  }
  config::tls_config server() const {
    config::tls_config tls;
    tls.certificate = dir.file("localhost.pem");
    tls.key = dir.file("localhost.key");
    return tls;
  }
};

http_limits limits() {
  http_limits l;
  l.max_connections = 16;
  l.max_body_bytes = 64 * 1024;
  l.threads = 2;
  l.max_waiting = 4;
  l.reserved_paths = {"/healthz"};
  return l;
}

} // namespace

TEST(HttpServerTls, AnswersManyRequestsOnOneKeepAliveConnection) {
  tls_files files;
  http_server server{limits(), "test listener"};
  server.routes().Get("/hello",
                      [](const httplib::Request&, httplib::Response& res) {
                        res.set_content("hello", "text/plain");
                      });
  server.routes().Post("/echo",
                       [](const httplib::Request& req, httplib::Response& res) {
                         res.set_content(req.body, "text/plain");
                       });
  server.use_tls(files.server());
  EXPECT_TRUE(server.uses_tls());
  server.listen({"127.0.0.1", 0});
  httplib::SSLClient client{"127.0.0.1", server.port()};
  client.set_ca_cert_path(files.dir.file("ca.pem").c_str());
  // (The certificate names localhost; this client connects to 127.0.0.1.)
  client.enable_server_certificate_verification(false);
  client.set_keep_alive(true);
  client.set_read_timeout(10, 0);
  for (int i = 0; i < 5; ++i) {
    auto r = client.Get("/hello");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello");
  }
  // Bodies larger than a TLS record (16 KiB) come whole.
  std::string body(40 * 1024, 'x');
  for (size_t i = 0; i < body.size(); ++i)
    body[i] = static_cast<char>('a' + i % 26);
  auto r = client.Post("/echo", body, "text/plain");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, body);
  // All of it on one connection, through one handshake.
  EXPECT_EQ(server.stats().accepted, 1u);
  EXPECT_EQ(server.stats().requests, 6u);
  EXPECT_EQ(server.stats().handshakes_failed, 0u);
  // A plain client on it hears nothing it could take for an answer.
  httplib::Client plain{"127.0.0.1", server.port()};
  plain.set_read_timeout(5, 0);
  auto p = plain.Get("/hello");
  EXPECT_TRUE(!p || p->status == 400);
  EXPECT_EQ(server.stats().plain_http, 1u);
}

TEST(HttpServerTls, RefusesFilesItCannotUse) {
  tls_files files;
  http_server server{limits(), "test listener"};
  auto wrong = files.server();
  wrong.key = files.dir.file("other.key");
  try {
    server.use_tls(wrong);
    FAIL() << "a key of another certificate was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string{e.what()}.find("does not match the certificate"),
              std::string::npos)
      << e.what();
  }
  auto missing = files.server();
  missing.certificate = files.dir.file("nothing.pem");
  try {
    server.use_tls(missing);
    FAIL() << "a missing certificate was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string{e.what()}.find("cannot use the certificate"),
              std::string::npos)
      << e.what();
  }
  server.listen({"127.0.0.1", 0});
  EXPECT_THROW(server.use_tls(files.server()), std::logic_error);
}
