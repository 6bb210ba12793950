// The cluster view: a worker (in this process) and a handler node (`cmdbus
// node --demo`) publish their admin actors on ports of 127.0.0.1, and
// `cmdbus cluster status` shows both in one table (and as JSON), flagging
// an address where nothing answers; `cmdbus cluster drain` makes the worker
// stop taking work, waits for its running commands and reports it idle,
// after which the worker takes no new commands (another worker does). With
// TLS only a client with a certificate of the worker's CA gets an answer.
// A node frozen with SIGSTOP (its admin port accepts and never answers) is
// flagged unreachable once `--timeout` has passed, with and without TLS.

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "cmdbus/actors/ops/admin.hpp"
#include "cmdbus/model/errors.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/certificates.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// `cmdbus node --demo` for `domain` with 3 handlers, its door on a free
// port and its admin actor on `admin`, without any database settings;
// `extra_args` (TLS options) added.
class admin_node {
public:
  admin_node(const std::string& domain, const std::string& admin,
             const std::vector<std::string>& extra_args = {})
    : port_file_((fs::temp_directory_path() / (unique_name("node") + ".port"))
                   .string()) {
    std::vector<std::string> args{"node",          "--demo",
                                  "--domain",      domain,
                                  "--concurrency", "3",
                                  "--listen",      "127.0.0.1:0",
                                  "--port-file",   port_file_,
                                  "--heartbeat",   "500ms",
                                  "--admin",       admin};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    proc_ = std::make_unique<background_cmdbus>(
      args, std::vector<std::string>{"CMDBUS_NODE_NAME=admin-node",
                                     "PGHOST=/nonexistent", "PGDATABASE=none"});
    eventually(
      [&] {
        std::ifstream in{port_file_};
        return static_cast<bool>(in >> port_) && port_ > 0;
      },
      20s);
  }
  ~admin_node() {
    proc_->stop(20s);
    std::error_code ec;
    fs::remove(port_file_, ec);
  }

  std::string address() const {
    return "127.0.0.1:" + std::to_string(port_);
  }

  /// Sends `sig` (SIGSTOP, SIGCONT) to the node.
  void signal(int sig) {
    proc_->signal(sig);
  }

private:
  std::string port_file_;
  int port_ = 0;
  std::unique_ptr<background_cmdbus> proc_;
};

std::string loopback(int port) {
  return "127.0.0.1:" + std::to_string(port);
}

// A worker for `domain` with two local slots, its admin actor on `admin`
// and the remote pools `pools`.
config::worker_config admin_cfg(const std::string& domain,
                                const std::string& admin,
                                std::vector<std::string> pools = {}) {
  auto cfg = make_cfg({domain}, 2);
  cfg.admin = admin;
  cfg.remote.pools = std::move(pools);
  cfg.remote.heartbeat_interval = 500ms;
  cfg.remote.connect_timeout = 2s;
  cfg.remote.reconnect_max = 500ms;
  return cfg;
}

rapidjson::Document parse(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  EXPECT_FALSE(doc.HasParseError()) << text;
  return doc;
}

std::string str(const rapidjson::Value& v, const char* key) {
  return v.HasMember(key) && v[key].IsString() ? v[key].GetString() : "";
}

int64_t num(const rapidjson::Value& v, const char* key) {
  return v.HasMember(key) && v[key].IsInt64() ? v[key].GetInt64() : -1;
}

// A directory of its own with a CA and the certificates it signed for
// `names`, removed at the end.
class cert_dir {
public:
  explicit cert_dir(const std::vector<std::string>& names) {
    fs::create_directories(dir_);
    make_ca(dir_.string(), "ca");
    for (auto& name : names)
      make_cert(dir_.string(), name, "ca");
  }
  ~cert_dir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  /// The TLS options of a process with the certificate `name`.
  std::vector<std::string> tls_args(const std::string& name) const {
    return {"--tls-certificate", file(name + ".pem"), "--tls-key",
            file(name + ".key"), "--tls-ca-file", file("ca.pem")};
  }

private:
  std::string file(const std::string& name) const {
    return (dir_ / name).string();
  }
  fs::path dir_ = fs::temp_directory_path() / unique_name("cmdbus_admin_tls");
};

// `cmdbus cluster status --timeout 1s` against a node whose admin port
// accepts connections and never answers (the node stopped with SIGSTOP):
// the address is reported unreachable (exit 5) once the timeout has
// passed. The 20 s wait is a guard against a client that never returns,
// not a measure of how long it takes.
void frozen_admin_port_is_flagged(const std::vector<std::string>& node_tls,
                                  const std::vector<std::string>& cli_tls) {
  auto d = unique_name("adm");
  auto admin = loopback(free_port());
  admin_node n{d, admin, node_tls};
  std::vector<std::string> args{"cluster",   "status", "--nodes", admin,
                                "--timeout", "1s",     "--json"};
  args.insert(args.end(), cli_tls.begin(), cli_tls.end());
  ASSERT_TRUE(eventually([&] { return run_cmdbus(args).exit_code == 0; }, 20s))
    << "the node's admin port does not answer";
  n.signal(SIGSTOP);
  finally resume{[&] { n.signal(SIGCONT); }};
  background_cmdbus status{args};
  auto r = status.wait(20s);
  ASSERT_TRUE(r.has_value())
    << "cmdbus cluster status --timeout 1s still runs after 20 s";
  EXPECT_EQ(r->exit_code, 5) << r->out << r->err;
  auto doc = parse(r->out);
  ASSERT_TRUE(doc.IsArray() && doc.Size() == 1) << r->out;
  EXPECT_EQ(str(doc[0], "address"), admin);
  EXPECT_FALSE(doc[0]["reachable"].GetBool()) << r->out;
  EXPECT_FALSE(str(doc[0], "error").empty()) << r->out;
}

} // namespace

TEST(ClusterAdmin, StatusShowsWorkerAndNodeAndFlagsAnUnreachableAddress) {
  bus_env e;
  auto d = unique_name("adm");
  auto node_admin = loopback(free_port());
  admin_node n{d, node_admin};
  auto worker_admin = loopback(free_port());
  handler_registry reg;
  reg.add(d, "Local", null_result);
  worker w{admin_cfg(d, worker_admin, {n.address()}), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually(
    [&] { return w.metrics().at(0)->remote_pools.load() == 1; }, 30s));
  ASSERT_TRUE(eventually([&] { return w.is_ready(); }, 20s));
  auto dead = loopback(free_port());

  auto r = run_cmdbus({"cluster", "status", "--nodes",
                       worker_admin + "," + node_admin, "--nodes", dead,
                       "--json"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  auto doc = parse(r.out);
  ASSERT_TRUE(doc.IsArray()) << r.out;
  ASSERT_EQ(doc.Size(), 3u) << r.out;

  auto& wr = doc[0];
  EXPECT_EQ(str(wr, "address"), worker_admin);
  ASSERT_TRUE(wr["reachable"].GetBool()) << r.out;
  auto& ws = wr["status"];
  EXPECT_EQ(num(ws, "protocol"), 1);
  EXPECT_EQ(str(ws, "kind"), "worker");
  EXPECT_EQ(str(ws, "readiness"), "ready");
  EXPECT_EQ(str(ws, "health"), "healthy");
  EXPECT_EQ(num(ws["slots"], "local"), 2);
  EXPECT_EQ(num(ws["slots"], "remote"), 3);
  ASSERT_EQ(ws["domains"].Size(), 1u);
  auto& wd = ws["domains"][0];
  EXPECT_EQ(str(wd, "domain"), d);
  EXPECT_EQ(num(wd, "in_flight"), 0);
  EXPECT_EQ(num(wd["remote_pools"], "connected"), 1);
  ASSERT_EQ(wd["remote_pools"]["configured"].Size(), 1u);
  EXPECT_EQ(std::string{wd["remote_pools"]["configured"][0].GetString()},
            n.address());

  auto& nr = doc[1];
  ASSERT_TRUE(nr["reachable"].GetBool()) << r.out;
  auto& ns = nr["status"];
  EXPECT_EQ(str(ns, "kind"), "node");
  EXPECT_EQ(str(ns, "name"), "admin-node");
  EXPECT_EQ(num(ns["slots"], "local"), 3);
  EXPECT_EQ(num(ns, "sessions"), 1); // the worker's session for d
  EXPECT_EQ(str(ns["domains"][0], "domain"), d);

  auto& dr = doc[2];
  EXPECT_EQ(str(dr, "address"), dead);
  EXPECT_FALSE(dr["reachable"].GetBool());
  EXPECT_FALSE(str(dr, "error").empty());

  // The table: one row each, the dead one flagged.
  auto t = run_cmdbus({"cluster", "status", "--nodes",
                       worker_admin + "," + node_admin + "," + dead});
  EXPECT_EQ(t.exit_code, 5) << t.err;
  EXPECT_NE(t.out.find("ADDRESS"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("worker"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("admin-node"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find(dead + ": "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("UNREACHABLE"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("2+3"), std::string::npos) << t.out;

  // Every address answers: exit 0.
  auto ok = run_cmdbus(
    {"cluster", "status", "--nodes", worker_admin + "," + node_admin});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_EQ(ok.out.find("UNREACHABLE"), std::string::npos) << ok.out;

  // A node takes no work of its own: drain is refused.
  auto nd = run_cmdbus({"cluster", "drain", "--node", node_admin});
  EXPECT_EQ(nd.exit_code, 4) << nd.out << nd.err;
  EXPECT_NE(nd.err.find("takes no work of its own"), std::string::npos)
    << nd.err;
  // Nothing answers there.
  auto gone = run_cmdbus({"cluster", "drain", "--node", dead});
  EXPECT_EQ(gone.exit_code, 5) << gone.out << gone.err;
  EXPECT_NE(gone.err.find("unreachable"), std::string::npos) << gone.err;
  // Usage errors.
  EXPECT_EQ(run_cmdbus({"cluster", "status"}).exit_code, 1);
  EXPECT_EQ(run_cmdbus({"cluster", "drain"}).exit_code, 1);
  EXPECT_EQ(run_cmdbus({"cluster", "nodes"}).exit_code, 1);
}

TEST(ClusterAdmin, DrainReportsIdleAndTheWorkerTakesNoNewCommandsAfterIt) {
  bus_env e;
  auto d = unique_name("adm");
  auto admin = loopback(free_port());
  holding_handler held;
  handler_registry reg;
  reg.add(d, "Held", held.fn());
  reg.add(d, "Quick", null_result);
  worker w{admin_cfg(d, admin), std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] { return w.is_ready(); }, 20s));
  e.bus.send(make_req(d, "Held"));
  ASSERT_TRUE(eventually([&] { return held.entered.load() == 1; }, 20s));

  auto drain = std::async(std::launch::async, [&] {
    return run_cmdbus(
      {"cluster", "drain", "--node", admin, "--timeout", "60s", "--json"});
  });
  // Draining: no longer ready, the held command still running.
  ASSERT_TRUE(eventually([&] { return !w.is_ready(); }, 20s));
  auto during = run_cmdbus({"cluster", "status", "--nodes", admin, "--json"});
  EXPECT_EQ(during.exit_code, 0) << during.err;
  auto doc = parse(during.out);
  ASSERT_TRUE(doc.IsArray() && doc.Size() == 1) << during.out;
  EXPECT_EQ(str(doc[0]["status"], "readiness"), "draining") << during.out;
  EXPECT_EQ(num(doc[0]["status"], "in_flight"), 1) << during.out;
  EXPECT_EQ(drain.wait_for(0s), std::future_status::timeout);

  held.release.open();
  auto r = drain.get();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  auto rep = parse(r.out);
  ASSERT_TRUE(rep.IsObject()) << r.out;
  EXPECT_TRUE(rep["idle"].GetBool()) << r.out;
  EXPECT_EQ(str(rep["status"], "readiness"), "drained") << r.out;
  EXPECT_EQ(num(rep["status"], "in_flight"), 0) << r.out;
  EXPECT_EQ(count_status(e.conn, d, "COMPLETED"), 1);

  // New commands stay with the queue: a second worker takes them all, the
  // drained one none.
  auto received = w.stats().received;
  std::vector<uuid> later;
  for (int i = 0; i < 5; ++i)
    later.push_back(e.bus.send(make_req(d, "Quick")).command_id);
  handler_registry other_reg;
  other_reg.add(d, "Quick", null_result);
  worker other{make_cfg({d}, 2), std::move(other_reg)};
  finally stop_other{[&] { stop_worker(other); }};
  other.start();
  ASSERT_TRUE(eventually(
    [&] { return count_status(e.conn, d, "COMPLETED") == 6; }, 30s));
  EXPECT_EQ(other.stats().received, 5);
  EXPECT_EQ(w.stats().received, received);
  EXPECT_FALSE(w.is_ready());
}

TEST(ClusterAdmin, WithTlsOnlyACertificateOfTheTrustedCaGetsAnAnswer) {
  bus_env e;
  auto dir = fs::temp_directory_path() / unique_name("cmdbus_admin_tls");
  fs::create_directories(dir);
  finally cleanup{[&] {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }};
  auto certs = dir.string();
  make_ca(certs, "ca");
  make_ca(certs, "rogue_ca");
  make_cert(certs, "worker", "ca");
  make_cert(certs, "cli", "ca");
  make_cert(certs, "rogue", "rogue_ca");
  auto file = [&](const std::string& name) { return (dir / name).string(); };
  auto d = unique_name("adm");
  auto admin = loopback(free_port());
  handler_registry reg;
  reg.add(d, "Local", null_result);
  auto cfg = admin_cfg(d, admin);
  cfg.tls.certificate = file("worker.pem");
  cfg.tls.key = file("worker.key");
  cfg.tls.ca_file = file("ca.pem");
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  auto status = [&](const std::string& cert) {
    std::vector<std::string> args{"cluster", "status", "--nodes", admin,
                                  "--timeout", "3s", "--json"};
    if (!cert.empty())
      args.insert(args.end(),
                  {"--tls-certificate", file(cert + ".pem"), "--tls-key",
                   file(cert + ".key"), "--tls-ca-file", file("ca.pem")});
    return run_cmdbus(args);
  };
  auto good = status("cli");
  EXPECT_EQ(good.exit_code, 0) << good.out << good.err;
  EXPECT_NE(good.out.find("\"kind\":\"worker\""), std::string::npos)
    << good.out;
  auto rogue = status("rogue");
  EXPECT_EQ(rogue.exit_code, 5) << rogue.out << rogue.err;
  EXPECT_NE(rogue.out.find("\"reachable\":false"), std::string::npos)
    << rogue.out;
  auto plain = status("");
  EXPECT_EQ(plain.exit_code, 5) << plain.out << plain.err;
  EXPECT_NE(plain.out.find("\"reachable\":false"), std::string::npos)
    << plain.out;
  // Still serving the trusted CA's clients.
  EXPECT_EQ(status("cli").exit_code, 0);
}

TEST(ClusterAdmin, FrozenNodeIsFlaggedUnreachableAfterTheTimeout) {
  frozen_admin_port_is_flagged({}, {});
}

TEST(ClusterAdmin, WithTlsAFrozenNodeIsFlaggedUnreachableAfterTheTimeout) {
  cert_dir certs{{"node", "cli"}};
  frozen_admin_port_is_flagged(certs.tls_args("node"), certs.tls_args("cli"));
}

TEST(ClusterAdmin, StatusPageAndClusterStatusShowOneThroughputWithRetries) {
  // Every command fails twice (retried) before it completes: the status
  // page and the admin actor must show the same commands per second for
  // the domain and the worker.
  bus_env e;
  auto d = unique_name("adm");
  auto admin = loopback(free_port());
  handler_registry reg;
  reg.add(d, "Flaky", [](const command&, handler_context& ctx) -> json {
    if (ctx.attempt() < 3)
      throw transient_command_error("BUSY", "try again");
    return json::null();
  });
  auto cfg = admin_cfg(d, admin);
  cfg.http = "127.0.0.1:0";
  worker w{cfg, std::move(reg)};
  finally stop{[&] { stop_worker(w); }};
  w.start();
  ASSERT_TRUE(eventually([&] { return w.is_ready(); }, 20s));
  constexpr int sent = 30;
  for (int i = 0; i < sent; ++i)
    e.bus.send(make_req(d, "Flaky"));
  // Counted after their commit.
  ASSERT_TRUE(eventually([&] { return w.stats().completed == sent; }, 60s));
  EXPECT_EQ(w.stats().retried, 2 * sent);

  // The throughput over the last minute as the admin actor reports it, to
  // one decimal like the page ("" while unknown).
  admin::client client{actors::network_settings{}};
  auto admin_rates = [&] {
    auto a = client.ask({admin}, false, 3s).front();
    std::pair<std::string, std::string> out;
    if (!a.reached)
      return out;
    auto doc = parse(a.json);
    auto text = [](const rapidjson::Value& v) {
      if (!v.IsNumber())
        return std::string{};
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", v.GetDouble());
      return std::string{buf};
    };
    out.first = text(doc["domains"][0]["throughput_1m"]);
    out.second = text(doc["throughput_1m"]);
    return out;
  };
  // The status page's figure for the domain.
  auto page_rate = [&] {
    auto body = http_get(w.http_port(), "/").body;
    const std::string mark = "data-field=\"throughput\">";
    auto at = body.find(mark);
    if (at == std::string::npos)
      return std::string{};
    at += mark.size();
    auto end = body.find(" /s<", at);
    return end == std::string::npos ? std::string{}
                                    : body.substr(at, end - at);
  };
  // Both change as the window moves: read the admin actor before and after
  // the page, and compare when its figure did not move in between.
  std::string page;
  std::pair<std::string, std::string> before;
  std::pair<std::string, std::string> after;
  bool compared = eventually(
    [&] {
      before = admin_rates();
      page = page_rate();
      after = admin_rates();
      if (before != after || before.first.empty() || page.empty()
          || std::stod(before.first) <= 0)
        return false;
      return page == before.first;
    },
    20s);
  EXPECT_TRUE(compared) << "status page " << page << "/s, admin "
                        << before.first << "/s then " << after.first << "/s";
  // One domain: the worker's figure is the domain's.
  EXPECT_EQ(before.second, before.first);
}
