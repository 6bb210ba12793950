// `cmdbus node`, the handler node, on its own: the command line's refusals
// (no --demo, no domain, bad values, a partial or unusable TLS set) with
// their exit codes, --help, the loopback default, the port file, a node that
// serves a worker's hello and commands without any database, and TLS that
// lets in only peers with a certificate of the trusted CA and survives
// hostile connections (what is no TLS, silent peers) idle. The worker side
// of remote pools is tested elsewhere; here a small in-process client
// plays the worker. No database is needed.

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/network.hpp"
#include "cmdbus/actors/remote_protocol.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/certificates.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// Reads the port a node wrote to `file`, waiting for it.
int read_port(const std::string& file) {
  int port = 0;
  eventually(
    [&] {
      std::ifstream in{file};
      return static_cast<bool>(in >> port) && port > 0;
    },
    20s);
  return port;
}

// Whether a TCP socket listens on ADDR:port; `addr_hex` as in
// /proc/net/tcp ("0100007F" is 127.0.0.1, "00000000" any address).
bool listens_on(const std::string& addr_hex, int port) {
  std::ifstream in{"/proc/net/tcp"};
  std::string line;
  char want[32];
  std::snprintf(want, sizeof want, "%s:%04X", addr_hex.c_str(), port);
  while (std::getline(in, line))
    if (line.find(want) != std::string::npos
        && line.find(" 0A ") != std::string::npos) // LISTEN
      return true;
  return false;
}

// A client that plays the worker: an actor system with the network set-up
// (optionally TLS) and a lease actor that answers extensions.
struct client {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor lease;

  explicit client(const config::tls_config& tls = {}) {
    actors::configure_network(cfg, {1000ms, tls});
    sys = std::make_unique<caf::actor_system>(cfg);
    // (An argument: CAF 0.17's spawn of a function without any binds a
    // reference to a null tuple, which UBSan reports.)
    lease = sys->spawn(
      [](int) -> caf::behavior {
        return {[](atom::extend, const std::vector<int64_t>& ids, int,
                   bool) { return static_cast<int>(ids.size()); }};
      },
      0);
  }

  ~client() {
    caf::anon_send_exit(lease, caf::exit_reason::kill);
  }

  // Connects to the door at 127.0.0.1:port without blocking an actor (as
  // the worker does): the door, or the error's text.
  std::pair<remote::node_door_actor, std::string> connect(int port) {
    remote::node_door_actor door;
    std::string error;
    caf::scoped_actor self{*sys};
    self
      ->request(actors::connector(*sys), 10s, caf::connect_atom::value,
                std::string{"127.0.0.1"}, static_cast<uint16_t>(port))
      .receive(
        [&](caf::node_id&, caf::strong_actor_ptr& ptr,
            std::set<std::string>& ifs) {
          if (!ptr)
            error = "no actor published";
          else if (!actors::is_node_door(*sys, ifs))
            error = "not a node door";
          else
            door = caf::actor_cast<remote::node_door_actor>(ptr);
        },
        [&](caf::error& err) { error = sys->render(err); });
    return {door, error};
  }

  // Says hello for `domain`: the session, or the error's text; `offer`
  // receives the node's offer.
  std::pair<remote::handler_pool_actor, std::string>
  hello(const remote::node_door_actor& door, const std::string& domain,
        remote::pool_offer* offer = nullptr) {
    remote::handler_pool_actor pool;
    std::string error;
    caf::scoped_actor self{*sys};
    self
      ->request(door, 10s, atom::hello::value, remote::protocol_version,
                std::string{"test-worker"}, domain, lease)
      .receive(
        [&](remote::pool_offer& x, caf::actor& session) {
          pool = caf::actor_cast<remote::handler_pool_actor>(session);
          if (offer != nullptr)
            *offer = x;
        },
        [&](caf::error& err) { error = actors::describe(err); });
    return {pool, error};
  }

  // Runs a Test command on `pool`: its outcome.
  outcome run(const remote::handler_pool_actor& pool, const std::string& domain,
              const std::string& data = "{}") {
    received_command rc;
    rc.cmd.domain = domain;
    rc.cmd.command_type = "Test";
    rc.cmd.command_id = uuid::random();
    rc.cmd.data = json::parse(data);
    rc.msg_id = 1;
    rc.attempt = 1;
    rc.max_attempts = 3;
    outcome out;
    out.kind = outcome_kind::transient;
    out.error_code = "NO_ANSWER";
    caf::scoped_actor self{*sys};
    self->request(pool, 10s, atom::handle::value, remote::to_wire(rc))
      .receive([&](remote::wire_outcome& wo) { out = remote::from_wire(wo); },
               [&](caf::error& err) { out.error_message = sys->render(err); });
    return out;
  }
};

std::vector<std::string> node_args(const std::string& domain,
                                   const std::string& port_file) {
  return {"node",    "--demo",      "--domain",  domain, "--concurrency",
          "2",       "--listen",    "127.0.0.1:0", "--port-file", port_file};
}

// The environment of a node that could not reach any database.
const std::vector<std::string> no_database{
  "PGHOST=/nonexistent", "PGDATABASE=none", "PGPORT=1", "CMDBUS_DSN="};

} // namespace

TEST(ClusterNode, HelpAndRefusals) {
  auto help = run_cmdbus({"node", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--listen HOST:PORT"), std::string::npos);
  EXPECT_NE(help.out.find("127.0.0.1:7400"), std::string::npos);
  EXPECT_NE(help.out.find("cleartext and unauthenticated"), std::string::npos);
  EXPECT_EQ(run_cmdbus({"help", "node"}).out, help.out);
  // Without --demo it has no handlers.
  auto plain = run_cmdbus({"node", "--domain", "payments"});
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_NE(plain.err.find("no handlers for domain 'payments'"),
            std::string::npos)
    << plain.err;
  auto no_domain = run_cmdbus({"node", "--demo"});
  EXPECT_EQ(no_domain.exit_code, 1);
  EXPECT_NE(no_domain.err.find("at least one domain"), std::string::npos)
    << no_domain.err;
  auto bad = run_cmdbus(
    {"node", "--demo", "--domain", "p", "--concurrency", "0", "--json"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find(R"("exit_code":1)"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("concurrency (0)"), std::string::npos) << bad.out;
  auto listen = run_cmdbus({"node", "--demo", "--domain", "p", "--listen",
                            "nowhere"});
  EXPECT_EQ(listen.exit_code, 1);
  EXPECT_NE(listen.err.find("listen (nowhere)"), std::string::npos)
    << listen.err;
  auto typo = run_cmdbus({"node", "--demo", "--domain", "p", "--listn", ":0"});
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_NE(typo.err.find("--listen"), std::string::npos) << typo.err;
  EXPECT_FALSE(crashed(typo));
}

TEST(ClusterNode, BadTlsSetExitsWithClearError) {
  temp_dir dir;
  auto junk = dir.file("junk.pem");
  std::ofstream{junk} << "not a certificate\n";
  // Part of the set (the rest from the environment or nowhere).
  auto partial = run_cmdbus({"node", "--demo", "--domain", "p", "--listen",
                             ":0", "--tls-certificate", junk});
  EXPECT_EQ(partial.exit_code, 1);
  EXPECT_NE(partial.err.find("missing: tls-key, tls-ca-file or tls-ca-path"),
            std::string::npos)
    << partial.err;
  auto env_only = run_cmdbus({"node", "--demo", "--domain", "p", "--listen",
                              ":0"},
                             {"CMDBUS_TLS_CA_FILE=" + junk});
  EXPECT_EQ(env_only.exit_code, 1);
  EXPECT_NE(env_only.err.find("missing: tls-certificate, tls-key"),
            std::string::npos)
    << env_only.err;
  auto unreadable = run_cmdbus(
    {"node", "--demo", "--domain", "p", "--listen", ":0", "--tls-certificate",
     junk, "--tls-key", dir.file("none.key"), "--tls-ca-file", junk});
  EXPECT_EQ(unreadable.exit_code, 1);
  EXPECT_NE(unreadable.err.find("none.key): no such file"), std::string::npos)
    << unreadable.err;
  // The whole set, but files that are no certificate.
  auto garbage = run_cmdbus({"node", "--demo", "--domain", "p", "--listen",
                             ":0", "--tls-certificate", junk, "--tls-key",
                             junk, "--tls-ca-file", junk});
  EXPECT_EQ(garbage.exit_code, 1);
  EXPECT_NE(garbage.err.find("not a usable PEM certificate"), std::string::npos)
    << garbage.err;
  EXPECT_FALSE(crashed(garbage));
}

TEST(ClusterNode, ServesWithoutDatabaseOnLoopbackAndWritesItsPort) {
  temp_dir dir;
  auto port_file = dir.file("port");
  background_cmdbus node{node_args("payments", port_file),
                         [] {
                           auto env = no_database;
                           env.push_back("CMDBUS_NODE_NAME=n1");
                           return env;
                         }()};
  auto port = read_port(port_file);
  ASSERT_GT(port, 0) << "no port file";
  EXPECT_TRUE(listens_on("0100007F", port));
  EXPECT_FALSE(listens_on("00000000", port));
  client c;
  auto [door, error] = c.connect(port);
  ASSERT_TRUE(door) << error;
  auto [none, refused] = c.hello(door, "orders");
  EXPECT_FALSE(none);
  EXPECT_NE(refused.find("does not serve domain 'orders'"), std::string::npos)
    << refused;
  auto [pool, hello_error] = c.hello(door, "payments");
  ASSERT_TRUE(pool) << hello_error;
  auto out = c.run(pool, "payments",
                   R"({"behavior":{"result":{"paid":true}}})");
  EXPECT_EQ(out.kind, outcome_kind::success) << out.error_message;
  EXPECT_EQ(out.result.text(), R"({"paid":true,"served_by":"n1"})");
  auto failed = c.run(pool, "payments",
                      R"({"behavior":{"outcome":"business_rule"}})");
  EXPECT_EQ(failed.kind, outcome_kind::business_rule);
  EXPECT_EQ(failed.error_code, "DEMO_BUSINESS_RULE");
  // A second node on the same port: refused (exit code 4), though the
  // door binds with SO_REUSEADDR (to rebind at once after a crash).
  auto twin = run_cmdbus({"node", "--demo", "--domain", "payments", "--listen",
                          "127.0.0.1:" + std::to_string(port)});
  EXPECT_EQ(twin.exit_code, 4) << twin.err;
  EXPECT_NE(twin.err.find("cannot listen on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
    << twin.err;
  auto r = node.stop(20s);
  ASSERT_TRUE(r) << "the node did not stop";
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_NE(r->err.find("handler node 'n1' listening on 127.0.0.1:"),
            std::string::npos)
    << r->err;
  EXPECT_NE(r->err.find("worker 'test-worker' connected for domain payments"),
            std::string::npos)
    << r->err;
  // Never a word about a database.
  EXPECT_EQ(r->err.find("database"), std::string::npos) << r->err;
}

TEST(ClusterNode, RefusesAnotherProtocolVersionOnBothSides) {
  temp_dir dir;
  auto port_file = dir.file("port");
  auto env = no_database;
  env.push_back("CMDBUS_TEST_PROTOCOL_VERSION=99");
  env.push_back("CMDBUS_NODE_NAME=future");
  background_cmdbus node{node_args("payments", port_file), env};
  auto port = read_port(port_file);
  ASSERT_GT(port, 0);
  client c;
  // The door's interface is the same in every version: the connection
  // works, the hello is refused.
  auto [door, error] = c.connect(port);
  ASSERT_TRUE(door) << error;
  auto [pool, refused] = c.hello(door, "payments");
  EXPECT_FALSE(pool);
  EXPECT_NE(refused.find("handler node 'future' speaks protocol 99, the "
                         "worker speaks 1"),
            std::string::npos)
    << refused;
  auto r = node.stop(20s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_NE(r->err.find("refused worker 'test-worker' (domain payments): it "
                        "speaks protocol 1, this node speaks 99"),
            std::string::npos)
    << r->err;
}

TEST(ClusterNode, OffersItsSlotsTypesAndHeartbeat) {
  temp_dir dir;
  auto port_file = dir.file("port");
  auto args = node_args("payments", port_file);
  args.insert(args.end(), {"--heartbeat", "500ms", "--domain", "orders"});
  background_cmdbus node{args, no_database};
  auto port = read_port(port_file);
  ASSERT_GT(port, 0);
  client c;
  auto [door, error] = c.connect(port);
  ASSERT_TRUE(door) << error;
  for (auto domain : {"payments", "orders"}) {
    remote::pool_offer offer;
    auto [pool, hello_error] = c.hello(door, domain, &offer);
    ASSERT_TRUE(pool) << hello_error;
    EXPECT_EQ(offer.protocol, remote::protocol_version);
    EXPECT_EQ(offer.slots, 2);
    EXPECT_EQ(offer.heartbeat_ms, 500);
    EXPECT_EQ(offer.command_types, std::vector<std::string>{"Test"});
    EXPECT_NE(offer.node_name.find(":" + std::to_string(port)),
              std::string::npos)
      << offer.node_name;
  }
  auto r = node.stop(20s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 0) << r->err;
}

TEST(ClusterNode, ListensOnLoopbackByDefault) {
  // No --listen: 127.0.0.1:7400, never every address.
  background_cmdbus node{{"node", "--demo", "--domain", "payments"},
                         no_database};
  EXPECT_TRUE(eventually([] { return listens_on("0100007F", 7400); }))
    << "nothing listens on 127.0.0.1:7400";
  EXPECT_FALSE(listens_on("00000000", 7400));
  auto r = node.stop(20s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 0) << r->err;
  // Every address without TLS: allowed, with a warning.
  temp_dir dir;
  auto port_file = dir.file("port");
  background_cmdbus open{{"node", "--demo", "--domain", "payments", "--listen",
                          "0.0.0.0:0", "--port-file", port_file},
                         no_database};
  auto port = read_port(port_file);
  ASSERT_GT(port, 0);
  EXPECT_TRUE(listens_on("00000000", port));
  auto r2 = open.stop(20s);
  ASSERT_TRUE(r2);
  EXPECT_NE(r2->err.find("without TLS"), std::string::npos) << r2->err;
}

namespace {

config::tls_config tls_of(const temp_dir& dir, const std::string& name,
                          const std::string& ca) {
  config::tls_config tls;
  tls.certificate = dir.file(name + ".pem");
  tls.key = dir.file(name + ".key");
  tls.ca_file = dir.file(ca + ".pem");
  return tls;
}

} // namespace

TEST(ClusterNode, TlsLetsInOnlyCertificatesOfTheTrustedCa) {
  temp_dir dir;
  auto certs = dir.path.string();
  make_ca(certs, "ca");
  make_ca(certs, "rogue_ca");
  make_cert(certs, "node", "ca");
  make_cert(certs, "worker", "ca");
  make_cert(certs, "rogue", "rogue_ca");
  auto port_file = dir.file("port");
  auto args = node_args("payments", port_file);
  args.insert(args.end(),
              {"--tls-certificate", dir.file("node.pem"), "--tls-key",
               dir.file("node.key")});
  auto env = no_database;
  env.push_back("CMDBUS_TLS_CA_FILE=" + dir.file("ca.pem"));
  env.push_back("CMDBUS_NODE_NAME=tls-node");
  background_cmdbus node{args, env};
  auto port = read_port(port_file);
  ASSERT_GT(port, 0);
  {
    // A certificate of another CA: refused during the handshake.
    client rogue{tls_of(dir, "rogue", "ca")};
    auto [door, error] = rogue.connect(port);
    EXPECT_FALSE(door);
    EXPECT_NE(error.find("disconnect_during_handshake"), std::string::npos)
      << error;
  }
  {
    // No certificate at all (a cleartext peer): refused.
    client plain;
    auto [door, error] = plain.connect(port);
    EXPECT_FALSE(door);
    EXPECT_FALSE(error.empty());
  }
  {
    // A certificate of the trusted CA: served.
    client good{tls_of(dir, "worker", "ca")};
    auto [door, error] = good.connect(port);
    ASSERT_TRUE(door) << error;
    auto [pool, hello_error] = good.hello(door, "payments");
    ASSERT_TRUE(pool) << hello_error;
    auto out = good.run(pool, "payments");
    EXPECT_EQ(out.kind, outcome_kind::success) << out.error_message;
    EXPECT_EQ(out.result.text(), R"({"served_by":"tls-node"})");
  }
  // The refusals did not hurt the node.
  auto r = node.stop(20s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_NE(r->err.find("TLS on (certificate"), std::string::npos) << r->err;
}

namespace {

// A TCP connection to 127.0.0.1:port that has sent `bytes` (nothing: a
// silent peer); closed when destroyed. `small_window`: it takes segments of
// 536 bytes and a small receive buffer, so that what the node sends it
// soon fills the node's send buffer while it does not read.
class raw_connection {
public:
  raw_connection(int port, const std::string& bytes,
                 bool small_window = false) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ >= 0 && small_window) {
      int mss = 536;
      setsockopt(fd_, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss);
      int rcvbuf = 2048;
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0
        && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0
        && !bytes.empty())
      ok_ = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL)
            == static_cast<ssize_t>(bytes.size());
    else
      ok_ = fd_ >= 0 && bytes.empty();
  }
  ~raw_connection() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  bool ok() const noexcept {
    return ok_;
  }

  int fd() const noexcept {
    return fd_;
  }

  /// Closes the connection with a reset (RST), as a crashed host's kernel
  /// would.
  void reset() {
    linger lg{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(fd_);
    fd_ = -1;
  }

  /// Waits for the peer to close the connection (at most `deadline`): true
  /// when it did.
  bool closed_by_peer(std::chrono::seconds deadline) {
    timeval tv{static_cast<time_t>(deadline.count()), 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[512];
    for (;;) {
      auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0)
        return true;
      if (n < 0)
        return errno == ECONNRESET;
    }
  }

private:
  int fd_ = -1;
  bool ok_ = false;
};

// A TLS client (OpenSSL in memory) whose bytes a test carries over a
// raw_connection itself, so that it decides when the node's handshake may
// go on.
class memory_tls_client {
public:
  memory_tls_client(const temp_dir& dir, const std::string& name) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_use_certificate_file(ctx_, dir.file(name + ".pem").c_str(),
                                 SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(ctx_, dir.file(name + ".key").c_str(),
                                SSL_FILETYPE_PEM);
    SSL_CTX_load_verify_locations(ctx_, dir.file("ca.pem").c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    ssl_ = SSL_new(ctx_);
    SSL_set_max_cert_list(ssl_, 1 << 20);
    in_ = BIO_new(BIO_s_mem());
    auto out = BIO_new(BIO_s_mem());
    out_ = out;
    SSL_set_bio(ssl_, in_, out); // ssl_ owns both
    SSL_set_connect_state(ssl_);
  }
  ~memory_tls_client() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }
  memory_tls_client(const memory_tls_client&) = delete;
  memory_tls_client& operator=(const memory_tls_client&) = delete;

  /// Goes on with the handshake, or reads application data once it has
  /// completed; returns what is to be sent.
  std::string step() {
    ERR_clear_error();
    if (!established_) {
      established_ = SSL_do_handshake(ssl_) == 1;
    } else {
      char buf[4096];
      int n = 0;
      while ((n = SSL_read(ssl_, buf, sizeof buf)) > 0)
        app_data_.append(buf, static_cast<size_t>(n));
    }
    std::string out;
    char buf[4096];
    int n = 0;
    while ((n = BIO_read(out_, buf, sizeof buf)) > 0)
      out.append(buf, static_cast<size_t>(n));
    return out;
  }

  /// Hands it bytes received.
  void feed(const std::string& bytes) {
    BIO_write(in_, bytes.data(), static_cast<int>(bytes.size()));
  }

  bool established() const noexcept {
    return established_;
  }

  /// The application data received after the handshake.
  const std::string& app_data() const noexcept {
    return app_data_;
  }

private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;
  BIO* out_ = nullptr;
  bool established_ = false;
  std::string app_data_;
};

// Sends all of `bytes` on `fd`.
bool send_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    auto n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Waits up to `deadline` for bytes on `fd` and returns what is there (""
// when nothing came); none when the connection was closed.
std::optional<std::string> receive(int fd, std::chrono::milliseconds deadline) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(deadline.count())) <= 0)
    return std::string{};
  char buf[16384];
  auto n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n > 0)
    return std::string(buf, static_cast<size_t>(n));
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return std::string{};
  return std::nullopt;
}

} // namespace

TEST(ClusterNode, TlsNodeSurvivesHostileConnectionsAndWaitsForSilentOnesIdle) {
  temp_dir dir;
  auto certs = dir.path.string();
  make_ca(certs, "ca");
  make_cert(certs, "node", "ca");
  make_cert(certs, "worker", "ca");
  auto port_file = dir.file("port");
  auto args = node_args("payments", port_file);
  args.insert(args.end(),
              {"--tls-certificate", dir.file("node.pem"), "--tls-key",
               dir.file("node.key"), "--tls-ca-file", dir.file("ca.pem")});
  background_cmdbus node{args, no_database};
  auto port = read_port(port_file);
  ASSERT_GT(port, 0);
  // 500 peers, 20 at a time, that send what is no TLS (BASP in cleartext,
  // HTTP): the node closes each connection, whether its bytes are there
  // when the node accepts it or come later, and nothing of the node goes
  // with it. (Once a peer is left waiting, the others stop waiting.)
  std::atomic<int> closed{0};
  std::atomic<bool> left_waiting{false};
  std::vector<std::thread> peers;
  for (int t = 0; t < 20; ++t)
    peers.emplace_back([&] {
      for (int i = 0; i < 25 && !left_waiting; ++i) {
        std::string bytes = i % 2 == 0 ? std::string("\0\0\0\x20", 4)
                                           + std::string(40, 'x')
                                       : std::string("GET / HTTP/1.1\r\n\r\n");
        raw_connection peer{port, bytes};
        if (peer.ok() && peer.closed_by_peer(5s))
          ++closed;
        else
          left_waiting = true;
      }
    });
  for (auto& peer : peers)
    peer.join();
  EXPECT_EQ(closed.load(), 500);
  EXPECT_FALSE(left_waiting) << "a peer was not closed within 5 s";
  if (auto gone = node.wait(0ms))
    FAIL() << "the node died (exit " << gone->exit_code << "): " << gone->err;
  // 20 peers that connect and stay silent: the node waits for them idle.
  // Its CPU time is bounded while a worker runs 20 commands of 200 ms one
  // after the other (about 4 s of a node doing next to nothing): under a
  // tenth of the wall time. A bound on what the node consumes, not on how
  // long anything takes: a connection that spins takes a whole core.
  std::vector<std::unique_ptr<raw_connection>> silent;
  for (int i = 0; i < 20; ++i) {
    silent.push_back(std::make_unique<raw_connection>(port, std::string{}));
    ASSERT_TRUE(silent.back()->ok());
  }
  // A worker gets in once the node has worked through the refusals (each
  // costs it a TLS context: CAF loads the certificates per connection).
  client good{tls_of(dir, "worker", "ca")};
  remote::node_door_actor door;
  std::string error;
  ASSERT_TRUE(eventually(
    [&] {
      std::tie(door, error) = good.connect(port);
      return static_cast<bool>(door);
    },
    30s))
    << error;
  auto [pool, hello_error] = good.hello(door, "payments");
  ASSERT_TRUE(pool) << hello_error;
  auto pid = node.pid();
  auto cpu_before = cpu_seconds(pid);
  ASSERT_TRUE(cpu_before.has_value());
  auto wall_before = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    auto out = good.run(
      pool, "payments",
      R"({"behavior":{"min_duration_ms":200,"max_duration_ms":200}})");
    ASSERT_EQ(out.kind, outcome_kind::success) << out.error_message;
  }
  auto cpu_after = cpu_seconds(pid);
  ASSERT_TRUE(cpu_after.has_value());
  std::chrono::duration<double> wall = std::chrono::steady_clock::now()
                                       - wall_before;
  auto cpu = *cpu_after - *cpu_before;
  EXPECT_LT(cpu, 0.1 * wall.count())
    << cpu << " s of CPU in " << wall.count() << " s with 20 silent peers";
  silent.clear();
  auto r = node.stop(20s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 0) << r->err;
}

TEST(ClusterNode, TlsHandshakeThatMustWaitToWriteGoesOnOrFailsCleanly) {
  temp_dir dir;
  auto certs = dir.path.string();
  make_ca(certs, "ca");
  make_cert(certs, "node", "ca");
  make_cert(certs, "worker", "ca");
  // The node presents its certificate with 100 copies of the CA's: a
  // handshake flight of about 80 kB, more than its send buffer holds for a
  // peer that takes segments of 536 bytes and does not read. Its handshake
  // then waits to write.
  {
    std::ofstream chain{dir.file("chain.pem")};
    std::ifstream node_pem{dir.file("node.pem")};
    chain << node_pem.rdbuf();
    for (int i = 0; i < 100; ++i) {
      std::ifstream ca_pem{dir.file("ca.pem")};
      chain << ca_pem.rdbuf();
    }
  }
  auto port_file = dir.file("port");
  auto args = node_args("payments", port_file);
  args.insert(args.end(),
              {"--tls-certificate", dir.file("chain.pem"), "--tls-key",
               dir.file("node.key"), "--tls-ca-file", dir.file("ca.pem")});
  background_cmdbus node{args, no_database};
  auto port = read_port(port_file);
  ASSERT_GT(port, 0);
  // Says hello and waits for the node's first bytes.
  auto start = [&](raw_connection& peer, memory_tls_client& tls) {
    ASSERT_TRUE(peer.ok());
    ASSERT_TRUE(send_all(peer.fd(), tls.step()));
    pollfd p{peer.fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10000), 1) << "the node did not answer the hello";
  };
  for (int i = 0; i < 20; ++i) {
    // Peers that never read, then reset the connection: each handshake
    // fails, its connection goes, the node stays.
    raw_connection peer{port, "", true};
    memory_tls_client tls{dir, "worker"};
    start(peer, tls);
    peer.reset();
  }
  if (auto gone = node.wait(0ms))
    FAIL() << "the node died (exit " << gone->exit_code << "): " << gone->err;
  {
    // A peer that reads late: the handshake goes on once there is room,
    // completes, and the node's first BASP message follows it.
    raw_connection peer{port, "", true};
    memory_tls_client tls{dir, "worker"};
    start(peer, tls);
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (tls.app_data().empty()
           && std::chrono::steady_clock::now() < deadline) {
      auto bytes = receive(peer.fd(), 500ms);
      ASSERT_TRUE(bytes) << "the node closed the connection";
      tls.feed(*bytes);
      ASSERT_TRUE(send_all(peer.fd(), tls.step()));
    }
    EXPECT_TRUE(tls.established());
    EXPECT_FALSE(tls.app_data().empty())
      << "no BASP message after the handshake";
  }
  if (auto gone = node.wait(0ms))
    FAIL() << "the node died (exit " << gone->exit_code << "): " << gone->err;
  // And a worker is served as ever.
  client good{tls_of(dir, "worker", "ca")};
  remote::node_door_actor door;
  std::string error;
  ASSERT_TRUE(eventually(
    [&] {
      std::tie(door, error) = good.connect(port);
      return static_cast<bool>(door);
    },
    20s))
    << error;
  auto [pool, hello_error] = good.hello(door, "payments");
  ASSERT_TRUE(pool) << hello_error;
  EXPECT_EQ(good.run(pool, "payments").kind, outcome_kind::success);
  auto r = node.stop(20s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 0) << r->err;
}
