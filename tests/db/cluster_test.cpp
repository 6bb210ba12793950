// Remote handler pools end to end, with three kinds of processes on
// 127.0.0.1: a worker (in this process, or `cmdbus worker`) and handler
// nodes (`cmdbus node --demo`, without any database access). Commands of a
// type the worker has no handler for run on the nodes; the worker's credits
// span its local and the nodes' slots; a node killed with kill -9 mid-load
// loses nothing and its commands run elsewhere long before their
// visibility timeout; a node restarted on its port is added back; a
// connection cut through a TCP proxy releases its commands at once;
// another protocol version is refused on both sides; and with TLS only a
// certificate of the trusted CA gets in. The kill -9 and freeze scenarios
// run with TLS too, where one node's fault must not cost the other node's
// link either, and a worker whose node is stopped with SIGSTOP waits for it
// idle (with and without TLS).
//
// The nodes' demo `Test` handler says where it ran ("served_by": the
// node's name, from CMDBUS_NODE_NAME) in its result, which the tests read
// from the reply queue.

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/db/background_cmdbus.hpp"
#include "tests/support/certificates.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// The heartbeat of every process here: a connection silent for three of
// them is cut.
const std::string heartbeat = "500ms";

// A directory of its own, removed at the end.
struct scratch_dir {
  fs::path path = fs::temp_directory_path() / unique_name("cmdbus_cluster");
  scratch_dir() {
    fs::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const {
    return (path / name).string();
  }
};

// A `cmdbus node --demo` serving `domain`, named `name`, without any
// database settings (PGHOST points nowhere).
class node {
public:
  node(const scratch_dir& dir, std::string name, const std::string& domain,
       int concurrency, const std::string& listen = "127.0.0.1:0",
       const std::vector<std::string>& extra_args = {},
       const std::vector<std::string>& extra_env = {})
    : name_(std::move(name)),
      port_file_(dir.file(name_ + "_" + unique_name("p") + ".port")) {
    std::vector<std::string> args{"node",        "--demo",
                                  "--domain",    domain,
                                  "--concurrency", std::to_string(concurrency),
                                  "--listen",    listen,
                                  "--port-file", port_file_,
                                  "--heartbeat", heartbeat};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<std::string> env{"CMDBUS_NODE_NAME=" + name_,
                                 "PGHOST=/nonexistent", "PGDATABASE=none"};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    proc_ = std::make_unique<background_cmdbus>(args, env);
    eventually(
      [&] {
        std::ifstream in{port_file_};
        return static_cast<bool>(in >> port_) && port_ > 0;
      },
      20s);
    if (port_ <= 0) {
      auto r = proc_->wait(5s);
      ADD_FAILURE() << "node " << name_ << " did not start: "
                    << (r ? r->err : std::string{"(still running)"});
    }
  }

  int port() const noexcept {
    return port_;
  }

  std::string address() const {
    return "127.0.0.1:" + std::to_string(port_);
  }

  /// Sends SIGTERM; returns what it printed.
  process_result stop() {
    auto r = proc_->stop(20s);
    return r ? *r : process_result{};
  }

  /// kill -9, at once.
  void kill() {
    proc_.reset(); // background_cmdbus's destructor sends SIGKILL
  }

  /// Sends `sig` (SIGSTOP, SIGCONT).
  void signal(int sig) {
    proc_->signal(sig);
  }

private:
  std::string name_;
  std::string port_file_;
  int port_ = 0;
  std::unique_ptr<background_cmdbus> proc_;
};

// The worker's configuration for `domain` with the given remote pools: two
// local slots (for the type "Local" only), leases of 60 s (far beyond
// what a test waits), quick reconnection.
config::worker_config cluster_cfg(const std::string& domain,
                                  std::vector<std::string> pools) {
  auto cfg = make_cfg({domain}, 2);
  cfg.visibility_timeout = 60s;
  cfg.remote.pools = std::move(pools);
  cfg.remote.heartbeat_interval = 500ms;
  cfg.remote.connect_timeout = 2s;
  cfg.remote.reconnect_max = 500ms;
  return cfg;
}

// The TLS options of a process with the certificate `name` of `dir`,
// trusting the CA `ca` of `dir`.
std::vector<std::string> tls_args(const scratch_dir& dir,
                                  const std::string& name,
                                  const std::string& ca) {
  return {"--tls-certificate", dir.file(name + ".pem"), "--tls-key",
          dir.file(name + ".key"), "--tls-ca-file", dir.file(ca + ".pem")};
}

// A CA in `dir` and the certificates it signed for the nodes ("node") and
// the worker ("worker"); or nothing at all (`enabled` false): the same
// scenario with and without TLS.
class tls_set {
public:
  tls_set(const scratch_dir& dir, bool enabled) : dir_(dir), enabled_(enabled) {
    if (!enabled_)
      return;
    make_ca(dir.path.string(), "ca");
    make_cert(dir.path.string(), "node", "ca");
    make_cert(dir.path.string(), "worker", "ca");
  }
  /// A node's options.
  std::vector<std::string> node_args() const {
    return enabled_ ? tls_args(dir_, "node", "ca") : std::vector<std::string>{};
  }
  /// The options of `cmdbus worker`.
  std::vector<std::string> worker_args() const {
    return enabled_ ? tls_args(dir_, "worker", "ca")
                    : std::vector<std::string>{};
  }
  /// The in-process worker's configuration `cfg`, with the worker's set.
  config::worker_config worker_cfg(config::worker_config cfg) const {
    if (enabled_) {
      cfg.tls.certificate = dir_.file("worker.pem");
      cfg.tls.key = dir_.file("worker.key");
      cfg.tls.ca_file = dir_.file("ca.pem");
    }
    return cfg;
  }

private:
  const scratch_dir& dir_;
  bool enabled_;
};

// The registry of the in-process worker: "Local" only.
handler_registry local_only(const std::string& domain) {
  handler_registry reg;
  reg.add(domain, "Local", [](const command&, handler_context&) {
    return obj(R"({"local":true})");
  });
  return reg;
}

// Sends `n` commands of `type` with the demo behaviour `behavior` (JSON)
// and a reply queue; returns their ids.
std::vector<uuid> send_many(bus_env& e, const std::string& domain,
                            const std::string& type, int n,
                            const std::string& behavior = "{}") {
  std::vector<uuid> ids;
  for (int i = 0; i < n; ++i) {
    auto req = make_req(domain, type, R"({"behavior":)" + behavior + "}");
    req.reply_to = domain + "__replies";
    req.max_attempts = 5;
    ids.push_back(e.bus.send(req).command_id);
  }
  return ids;
}

// Where each replied command ran: command id -> "served_by" ("" when the
// result has none, i.e. it ran on the worker).
std::map<std::string, std::string> served_by(bus_env& e,
                                             const std::string& domain) {
  std::map<std::string, std::string> where;
  for (auto& rep : messages(e.conn, domain + "__replies"))
    where[jget(e.conn, rep, "{command_id}").value_or("")]
      = jget(e.conn, rep, "{result,served_by}").value_or("");
  return where;
}

// A `cmdbus ARGS` in the background whose standard error goes to a file
// that the test reads while it runs.
class logged_cmdbus {
public:
  logged_cmdbus(const scratch_dir& dir, const std::vector<std::string>& args)
    : log_(dir.file(unique_name("log") + ".log")) {
    std::vector<std::string> sh{"-c", "exec \"$0\" \"$@\" 2>'" + log_ + "'",
                                CMDBUS_BINARY};
    sh.insert(sh.end(), args.begin(), args.end());
    proc_ = std::make_unique<background_cmdbus>(sh, std::vector<std::string>{},
                                                "/bin/sh");
  }

  /// What it logged so far.
  std::string log() const {
    std::ifstream in{log_};
    return {std::istreambuf_iterator<char>{in},
            std::istreambuf_iterator<char>{}};
  }

  /// Whether its log shows `text` within `deadline`.
  bool logs(const std::string& text, std::chrono::milliseconds deadline = 20s) {
    return eventually(
      [&] { return log().find(text) != std::string::npos; }, deadline);
  }

  /// SIGTERM; whether it exited in time.
  bool stop() {
    return proc_->stop(30s).has_value();
  }

  /// Its process id.
  pid_t pid() const {
    return proc_->pid();
  }

private:
  std::string log_;
  std::unique_ptr<background_cmdbus> proc_;
};

// `cmdbus worker` for `domain` with the nodes at `addresses` as its pools
// and no handlers of its own.
std::vector<std::string> worker_args(const std::string& domain,
                                     const std::vector<std::string>& addresses,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"worker", "--create", "--dsn", dsn(), "--domain", domain,
                                "--remote-heartbeat-interval", heartbeat,
                                "--remote-reconnect-max", "500ms"};
  for (auto& address : addresses)
    args.insert(args.end(), {"--remote-pool", address});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// `cmdbus worker` for `domain` with the node at `address` as its pool.
std::vector<std::string> worker_args(const std::string& domain,
                                     const std::string& address,
                                     std::vector<std::string> extra = {}) {
  return worker_args(domain, std::vector<std::string>{address},
                     std::move(extra));
}

// How many lines of `log` hold all of `parts`.
int lines_with(const std::string& log, const std::vector<std::string>& parts) {
  int n = 0;
  std::istringstream in{log};
  for (std::string line; std::getline(in, line);)
    n += std::all_of(parts.begin(), parts.end(),
                     [&](auto& p) { return line.find(p) != std::string::npos; })
           ? 1
           : 0;
  return n;
}

// Waits until `w` is connected to `n` remote pools.
bool connected(const worker& w, int64_t n) {
  return eventually(
    [&] { return w.metrics().at(0)->remote_pools.load() == n; }, 30s);
}

std::string behavior_ms(int ms) {
  return R"({"min_duration_ms":)" + std::to_string(ms)
         + R"(,"max_duration_ms":)" + std::to_string(ms) + "}";
}

} // namespace

// -- routing and credits -------------------------------------------------------

TEST(ClusterRouting, TypesRunWhereTheyAreServedAndCreditsSpanAllSlots) {
  bus_env e;
  scratch_dir dir;
  auto d = unique_name("cl");
  node n1{dir, "n1", d, 3};
  node n2{dir, "n2", d, 3};
  ASSERT_GT(n1.port(), 0);
  ASSERT_GT(n2.port(), 0);
  auto cfg = cluster_cfg(d, {n1.address(), n2.address()});
  cfg.prefetch = 0; // the slots alone bound what is in flight
  worker w{cfg, local_only(d)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(connected(w, 2));
  EXPECT_EQ(w.metrics().at(0)->remote_slots.load(), 6);
  auto local = send_many(e, d, "Local", 6);
  auto remote = send_many(e, d, "Test", 18, behavior_ms(300));
  // 2 local slots + 2 nodes x 3: never more in flight than 8 (no
  // prefetch), and more than the local slots alone once the nodes are in.
  int64_t most = 0;
  auto all_done = [&] {
    most = std::max<int64_t>(most, w.stats().in_flight);
    return count_status(e.conn, d, "COMPLETED") == 24;
  };
  ASSERT_TRUE(eventually(all_done, 60s))
    << count_status(e.conn, d, "COMPLETED") << " of 24 completed";
  EXPECT_LE(most, 8);
  EXPECT_GT(most, 2);
  auto where = served_by(e, d);
  std::set<std::string> nodes;
  for (auto& id : local)
    EXPECT_EQ(where[id.to_string()], "") << "Local ran on a node";
  for (auto& id : remote) {
    auto& n = where[id.to_string()];
    EXPECT_TRUE(n == "n1" || n == "n2") << "Test ran on '" << n << "'";
    nodes.insert(n);
  }
  EXPECT_EQ(nodes.size(), 2u) << "both nodes took Test commands";
  EXPECT_EQ(count_status(e.conn, d, "IN_TROUBLESHOOTING_QUEUE"), 0);
}

// -- failures ------------------------------------------------------------------

namespace {

// n1 and n2 busy with 60 commands; kill -9 of n2 mid-load, with or without
// TLS.
void killed_node_commands_run_elsewhere(bool tls) {
  bus_env e;
  scratch_dir dir;
  tls_set certs{dir, tls};
  auto d = unique_name("cl");
  node n1{dir, "n1", d, 3, "127.0.0.1:0", certs.node_args()};
  auto n2 = std::make_unique<node>(dir, "n2", d, 3, "127.0.0.1:0",
                                   certs.node_args());
  auto n2_port = n2->port();
  worker w{certs.worker_cfg(cluster_cfg(d, {n1.address(), n2->address()})),
           local_only(d)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(connected(w, 2));
  auto ids = send_many(e, d, "Test", 60, behavior_ms(150));
  ASSERT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") >= 18; }, 60s));
  // kill -9 mid-load: the commands it ran get no answer; the worker makes
  // them visible again at once and n1 runs them.
  auto killed_at = std::chrono::steady_clock::now();
  n2->kill();
  ASSERT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") == 60; }, 40s))
    << count_status(e.conn, d, "COMPLETED") << " of 60 completed";
  // Long before the 60 s visibility timeout (a generous bound: the machine
  // is shared).
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 40s);
  // Only the killed node was lost: its fault cost the other node nothing.
  EXPECT_EQ(w.metrics().at(0)->remote_disconnects.load(), 1);
  int rerun = 0;
  auto where = served_by(e, d);
  for (auto& id : ids)
    if (attempts_of(e.conn, d, id) >= 2) {
      ++rerun;
      EXPECT_EQ(where[id.to_string()], "n1");
    }
  EXPECT_GT(rerun, 0) << "the killed node's commands ran again";
  EXPECT_EQ(count_status(e.conn, d, "IN_TROUBLESHOOTING_QUEUE"), 0);
  // The node comes back on its port: the worker adds it back and it takes
  // work again.
  EXPECT_EQ(w.metrics().at(0)->remote_slots.load(), 3);
  node back{dir, "n2b", d, 3, "127.0.0.1:" + std::to_string(n2_port),
            certs.node_args()};
  ASSERT_EQ(back.port(), n2_port);
  ASSERT_TRUE(connected(w, 2));
  EXPECT_EQ(w.metrics().at(0)->remote_slots.load(), 6);
  auto more = send_many(e, d, "Test", 30, behavior_ms(150));
  ASSERT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") == 90; }, 60s));
  std::set<std::string> nodes;
  where = served_by(e, d);
  for (auto& id : more)
    nodes.insert(where[id.to_string()]);
  EXPECT_TRUE(nodes.count("n2b")) << "the restarted node took work again";
}

} // namespace

TEST(ClusterFailover, KilledNodeCommandsRunElsewhereLongBeforeTheirLease) {
  killed_node_commands_run_elsewhere(false);
}

namespace {

// n1 behind a TCP proxy and n2 direct (with or without TLS), each busy
// with three long commands (3 s); `fault` breaks the proxy. n1's commands come back and run on n2
// after its own three (about 6 s), where a lease would hold them for 60 s.
void proxied_node_fails(const std::function<void(tcp_proxy&)>& fault,
                        bool tls = false) {
  bus_env e;
  scratch_dir dir;
  tls_set certs{dir, tls};
  auto d = unique_name("cl");
  node n1{dir, "n1", d, 3, "127.0.0.1:0", certs.node_args()};
  node n2{dir, "n2", d, 3, "127.0.0.1:0", certs.node_args()};
  tcp_proxy proxy{n1.port()};
  worker w{certs.worker_cfg(cluster_cfg(
             d, {"127.0.0.1:" + std::to_string(proxy.port()), n2.address()})),
           local_only(d)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(connected(w, 2));
  auto ids = send_many(e, d, "Test", 6, behavior_ms(3000));
  // Both nodes busy with three each.
  ASSERT_TRUE(eventually([&] { return w.stats().in_flight == 6; }, 30s));
  fault(proxy);
  auto fault_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(connected(w, 1));
  EXPECT_EQ(w.metrics().at(0)->remote_disconnects.load(), 1);
  ASSERT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") == 6; }, 40s))
    << count_status(e.conn, d, "COMPLETED") << " of 6 completed";
  EXPECT_LT(std::chrono::steady_clock::now() - fault_at, 40s);
  auto where = served_by(e, d);
  int on_n2 = 0;
  for (auto& id : ids)
    on_n2 += where[id.to_string()] == "n2" ? 1 : 0;
  // n1 may finish its runs after the fault, but their outcomes never
  // arrive.
  EXPECT_EQ(on_n2, 6);
  // n2 was never lost meanwhile: n1's fault cost it nothing.
  EXPECT_EQ(w.metrics().at(0)->remote_disconnects.load(), 1);
}

} // namespace

TEST(ClusterFailover, ConnectionCutThroughProxyReleasesItsCommandsAtOnce) {
  proxied_node_fails([](tcp_proxy& proxy) { proxy.cut(); });
}

TEST(ClusterFailover, SilentConnectionIsDroppedAfterItsHeartbeatTimeout) {
  // Nothing is closed: the worker notices after three silent heartbeat
  // intervals (1.5 s here).
  proxied_node_fails([](tcp_proxy& proxy) { proxy.freeze(); });
}

// -- refusals --------------------------------------------------------------------

TEST(ClusterRefusal, AnotherProtocolVersionIsRefusedOnBothSides) {
  bus_env e;
  scratch_dir dir;
  auto d = unique_name("cl");
  auto old_node = std::make_unique<node>(
    dir, "old", d, 3, "127.0.0.1:0", std::vector<std::string>{},
    std::vector<std::string>{"CMDBUS_TEST_PROTOCOL_VERSION=99"});
  auto port = old_node->port();
  auto ids = send_many(e, d, "Test", 2);
  logged_cmdbus wk{dir, worker_args(d, old_node->address())};
  // The worker says why it cannot use the node ...
  EXPECT_TRUE(wk.logs("cannot use remote pool")) << wk.log();
  EXPECT_TRUE(wk.logs("protocol 99")) << wk.log();
  // ... and so does the node.
  auto node_out = old_node->stop();
  EXPECT_NE(node_out.err.find("refused"), std::string::npos) << node_out.err;
  EXPECT_NE(node_out.err.find("99"), std::string::npos) << node_out.err;
  EXPECT_EQ(count_status(e.conn, d, "COMPLETED"), 0);
  // A node of this version on the same port: the worker connects to it
  // and the commands run there.
  node good{dir, "good", d, 3, "127.0.0.1:" + std::to_string(port)};
  ASSERT_EQ(good.port(), port);
  EXPECT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") == 2; }, 40s))
    << wk.log();
  EXPECT_TRUE(wk.stop());
  auto where = served_by(e, d);
  for (auto& id : ids)
    EXPECT_EQ(where[id.to_string()], "good");
}

// -- TLS ---------------------------------------------------------------------------

TEST(ClusterTls, OnlyACertificateOfTheTrustedCaGetsIn) {
  bus_env e;
  scratch_dir dir;
  auto certs = dir.path.string();
  make_ca(certs, "ca");
  make_ca(certs, "rogue_ca");
  make_cert(certs, "node", "ca");
  make_cert(certs, "worker", "ca");
  make_cert(certs, "rogue", "rogue_ca");
  auto d = unique_name("cl");
  node n{dir, "tls", d, 3, "127.0.0.1:0", tls_args(dir, "node", "ca")};
  ASSERT_GT(n.port(), 0);
  // A worker that cannot connect says so and runs nothing.
  auto refused = [&](std::vector<std::string> extra) {
    logged_cmdbus wk{dir, worker_args(d, n.address(), std::move(extra))};
    EXPECT_TRUE(wk.logs("cannot use remote pool")) << wk.log();
    EXPECT_TRUE(wk.stop());
    return wk.log();
  };
  // A certificate of another CA: the handshake fails.
  auto rogue = refused(tls_args(dir, "rogue", "ca"));
  EXPECT_NE(rogue.find("disconnect_during_handshake"), std::string::npos)
    << rogue;
  EXPECT_EQ(rogue.find("connected:"), std::string::npos) << rogue;
  // No TLS at all: refused as well.
  auto plain = refused({});
  EXPECT_NE(plain.find("disconnect_during_handshake"), std::string::npos)
    << plain;
  EXPECT_EQ(plain.find("connected:"), std::string::npos) << plain;
  // The node is still up, and a worker with a certificate of the CA runs
  // commands there.
  auto ids = send_many(e, d, "Test", 2);
  auto cfg = cluster_cfg(d, {n.address()});
  cfg.tls.certificate = dir.file("worker.pem");
  cfg.tls.key = dir.file("worker.key");
  cfg.tls.ca_file = dir.file("ca.pem");
  worker w{cfg, local_only(d)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  EXPECT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") == 2; }, 40s));
  auto where = served_by(e, d);
  for (auto& id : ids)
    EXPECT_EQ(where[id.to_string()], "tls");
}

// -- TLS under faults ----------------------------------------------------------

TEST(ClusterTls, KilledNodeCommandsRunElsewhereLongBeforeTheirLease) {
  killed_node_commands_run_elsewhere(true);
}

TEST(ClusterTls, ConnectionCutThroughProxyReleasesItsCommandsAtOnce) {
  proxied_node_fails([](tcp_proxy& proxy) { proxy.cut(); }, true);
}

TEST(ClusterTls, SilentConnectionIsDroppedAfterItsHeartbeatTimeout) {
  proxied_node_fails([](tcp_proxy& proxy) { proxy.freeze(); }, true);
}

namespace {

// How many names in the replies of `domain` are `name` ("served_by").
int served_by_node(bus_env& e, const std::string& domain,
                   const std::string& name) {
  int n = 0;
  for (auto& [id, where] : served_by(e, domain))
    n += where == name ? 1 : 0;
  return n;
}

} // namespace

TEST(ClusterTls, KillingOneNodeNeverCostsAnotherNodesLink) {
  // kill -9 of node a, three times (restarted on its port each time), while
  // a and b run commands: the worker loses a each time and never b; b's
  // commands are never given back and run again.
  bus_env e;
  scratch_dir dir;
  tls_set certs{dir, true};
  auto d = unique_name("cl");
  auto a = std::make_unique<node>(dir, "a", d, 3, "127.0.0.1:0",
                                  certs.node_args());
  node b{dir, "b", d, 3, "127.0.0.1:0", certs.node_args()};
  ASSERT_GT(a->port(), 0);
  ASSERT_GT(b.port(), 0);
  auto a_address = a->address();
  logged_cmdbus wk{
    dir, worker_args(d, std::vector<std::string>{a_address, b.address()},
                     certs.worker_args())};
  // The reply queue exists before the first reply is read.
  e.conn.exec("SELECT pgmq.create($1)", {d + "__replies"});
  auto pool_lines = [&](const std::string& address, const std::string& what) {
    return lines_with(wk.log(), {"remote pool " + address + " " + what});
  };
  constexpr int kills = 3;
  int sent = 0;
  for (int i = 0; i < kills; ++i) {
    ASSERT_TRUE(eventually(
      [&] {
        return pool_lines(a_address, "(a) connected") == i + 1
               && pool_lines(b.address(), "(b) connected") == 1;
      },
      30s))
      << wk.log();
    // Both busy: 12 commands of 1 s for their 6 slots; a has finished one.
    auto by_a = served_by_node(e, d, "a");
    send_many(e, d, "Test", 12, behavior_ms(1000));
    sent += 12;
    ASSERT_TRUE(
      eventually([&] { return served_by_node(e, d, "a") > by_a; }, 30s));
    a->kill();
    ASSERT_TRUE(
      eventually([&] { return pool_lines(a_address, "lost") == i + 1; }, 20s))
      << wk.log();
    // b goes on answering the worker after a's loss, and is not lost.
    auto by_b = served_by_node(e, d, "b");
    ASSERT_TRUE(
      eventually([&] { return served_by_node(e, d, "b") > by_b; }, 30s));
    ASSERT_EQ(pool_lines(b.address(), "lost"), 0)
      << "b was lost when a was killed:\n"
      << wk.log();
    a = std::make_unique<node>(dir, "a", d, 3, a_address, certs.node_args());
    ASSERT_EQ(a->address(), a_address);
  }
  ASSERT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") == sent; }, 60s))
    << count_status(e.conn, d, "COMPLETED") << " of " << sent << " completed";
  EXPECT_EQ(count_status(e.conn, d, "IN_TROUBLESHOOTING_QUEUE"), 0);
  auto log = wk.log();
  EXPECT_EQ(pool_lines(b.address(), "lost"), 0) << log;
  EXPECT_EQ(pool_lines(b.address(), "disconnected"), 0) << log;
  EXPECT_EQ(pool_lines(a_address, "lost"), kills) << log;
  // One answer per command; only a's commands ran again, at most its three
  // slots' worth per kill.
  EXPECT_EQ(static_cast<int>(messages(e.conn, d + "__replies").size()), sent);
  int rerun = 0;
  for (auto& [id, where] : served_by(e, d))
    if (auto u = uuid::parse(id))
      rerun += attempts_of(e.conn, d, *u) >= 2 ? 1 : 0;
  EXPECT_LE(rerun, 3 * kills);
  EXPECT_TRUE(wk.stop());
}

namespace {

// The lines of a worker's log that report a failed connection attempt to
// `address`: the first of a kind is an error, the next ones are at debug
// level.
int failed_attempts(const std::string& log, const std::string& address) {
  return lines_with(log, {"cannot use remote pool " + address + ":"})
         + lines_with(log, {"remote pool " + address + " still unavailable"});
}

// A `cmdbus worker` whose only node is stopped with SIGSTOP keeps trying to
// reconnect with its backoff and uses next to no CPU meanwhile. This bounds
// what the worker consumes, not how long anything takes: over at least
// four failed attempts (however long they take on a loaded machine) its
// CPU time must stay under a tenth of the wall time that passed. An idle
// worker stays far below that; a connection that spins takes a whole core.
void worker_idles_while_its_node_is_frozen(bool tls) {
  bus_env e;
  scratch_dir dir;
  tls_set certs{dir, tls};
  auto d = unique_name("cl");
  node n{dir, "frozen", d, 3, "127.0.0.1:0", certs.node_args()};
  ASSERT_GT(n.port(), 0);
  auto extra = certs.worker_args();
  extra.insert(extra.end(), {"--log-level", "debug"});
  logged_cmdbus wk{dir, worker_args(d, n.address(), extra)};
  auto connections = [&] {
    return lines_with(wk.log(),
                      {"remote pool " + n.address() + " (frozen) connected"});
  };
  ASSERT_TRUE(eventually([&] { return connections() == 1; }, 30s)) << wk.log();
  n.signal(SIGSTOP);
  finally resume{[&] { n.signal(SIGCONT); }};
  // Lost after three silent heartbeat intervals.
  ASSERT_TRUE(wk.logs("remote pool " + n.address() + " lost")) << wk.log();
  auto pid = wk.pid();
  auto cpu_before = cpu_seconds(pid);
  ASSERT_TRUE(cpu_before.has_value());
  auto wall_before = std::chrono::steady_clock::now();
  auto attempts = failed_attempts(wk.log(), n.address());
  ASSERT_TRUE(eventually(
    [&] { return failed_attempts(wk.log(), n.address()) >= attempts + 4; },
    60s))
    << wk.log();
  auto cpu_after = cpu_seconds(pid);
  ASSERT_TRUE(cpu_after.has_value());
  std::chrono::duration<double> wall = std::chrono::steady_clock::now()
                                       - wall_before;
  auto cpu = *cpu_after - *cpu_before;
  EXPECT_LT(cpu, 0.1 * wall.count())
    << cpu << " s of CPU in " << wall.count() << " s with the node frozen";
  // The node goes on: the worker connects to it again.
  n.signal(SIGCONT);
  EXPECT_TRUE(eventually([&] { return connections() == 2; }, 30s)) << wk.log();
  EXPECT_TRUE(wk.stop());
}

} // namespace

TEST(ClusterFailover, WorkerWaitsIdleWhileItsNodeIsFrozen) {
  worker_idles_while_its_node_is_frozen(false);
}

TEST(ClusterTls, WorkerWaitsIdleWhileItsNodeIsFrozen) {
  worker_idles_while_its_node_is_frozen(true);
}
