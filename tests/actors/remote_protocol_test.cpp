// The wire protocol between workers and handler nodes: the wire types
// survive CAF's serializer, the conversions keep every field, bad input
// becomes the documented failure; the TLS set is all or nothing; and a
// handler node over loopback (a real middleman) answers hello, runs
// commands, forwards extend_visibility to the worker's lease actor, refuses
// another protocol version and an unknown domain, and ends a session whose
// worker went away.

#define CAF_SUITE actors.remote_protocol
#include "cmdbus/actors/remote_protocol.hpp"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/test/dsl.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/network.hpp"
#include "cmdbus/actors/node.hpp"
#include "cmdbus/model/errors.hpp"
#include "tests/support/eventually.hpp"

using namespace cmdbus;
using namespace std::chrono_literals;

namespace {

// Whether `f` throws an E.
template <class E, class F>
bool throws(F f) {
  try {
    f();
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

received_command full_delivery() {
  received_command rc;
  rc.cmd.domain = "payments";
  rc.cmd.command_type = "Debit";
  rc.cmd.command_id = uuid::random();
  rc.cmd.data = json::parse(R"({"amount":12.50,"to":"x"})");
  rc.cmd.correlation_id = uuid::random();
  rc.cmd.reply_to = "payments__replies";
  rc.batch_id = uuid::random();
  rc.msg_id = 42;
  rc.attempt = 2;
  rc.max_attempts = 5;
  return rc;
}

template <class T>
T round_trip(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  auto err = sink(x);
  CAF_REQUIRE(!err);
  T y;
  caf::binary_deserializer source{sys, buf};
  err = source(y);
  CAF_REQUIRE(!err);
  return y;
}

struct network_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  network_system() {
    actors::configure_network(cfg, {});
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

} // namespace

CAF_TEST(wire types survive the serializer) {
  network_system ns;
  auto& sys = *ns.sys;
  auto wc = remote::to_wire(full_delivery());
  auto wc2 = round_trip(sys, wc);
  CAF_CHECK_EQUAL(wc2.command_id, wc.command_id);
  CAF_CHECK_EQUAL(wc2.data, wc.data);
  CAF_CHECK(wc2.correlation_id == wc.correlation_id);
  CAF_CHECK(wc2.batch_id == wc.batch_id);
  CAF_CHECK_EQUAL(wc2.msg_id, 42);
  CAF_CHECK_EQUAL(wc2.max_attempts, 5);
  outcome out;
  out.kind = outcome_kind::business_rule;
  out.error_code = "CLOSED";
  out.error_message = "account closed";
  out.error_details = json::parse(R"({"account":"a"})");
  auto wo = round_trip(sys, remote::to_wire(out, 1500ns));
  CAF_CHECK_EQUAL(wo.kind, static_cast<int32_t>(outcome_kind::business_rule));
  CAF_CHECK_EQUAL(wo.error_details, R"({"account":"a"})");
  CAF_CHECK_EQUAL(wo.handler_ns, 1500);
  remote::pool_offer offer;
  offer.node_name = "n1";
  offer.command_types = {"A", "B"};
  offer.slots = 3;
  offer.heartbeat_ms = 1000;
  auto o2 = round_trip(sys, offer);
  CAF_CHECK_EQUAL(o2.protocol, remote::protocol_version);
  CAF_CHECK_EQUAL(o2.command_types.size(), 2u);
  CAF_CHECK_EQUAL(o2.slots, 3);
}

CAF_TEST(conversions keep every field with and without the optional ones) {
  auto rc = full_delivery();
  auto back = remote::from_wire(remote::to_wire(rc));
  CAF_CHECK(back.cmd == rc.cmd);
  CAF_CHECK(back.batch_id == rc.batch_id);
  CAF_CHECK_EQUAL(back.msg_id, rc.msg_id);
  CAF_CHECK_EQUAL(back.attempt, rc.attempt);
  CAF_CHECK_EQUAL(back.max_attempts, rc.max_attempts);
  rc.cmd.correlation_id.reset();
  rc.cmd.reply_to.reset();
  rc.batch_id.reset();
  auto wc = remote::to_wire(rc);
  CAF_CHECK(!wc.correlation_id && !wc.reply_to && !wc.batch_id);
  back = remote::from_wire(wc);
  CAF_CHECK(back.cmd == rc.cmd);
  CAF_CHECK(!back.batch_id);
  outcome out;
  out.result = json::parse(R"({"ok":true})");
  auto out2 = remote::from_wire(remote::to_wire(out));
  CAF_CHECK(out2.kind == outcome_kind::success);
  CAF_CHECK_EQUAL(out2.result.text(), R"({"ok":true})");
}

CAF_TEST(bad input becomes the documented failure) {
  auto wc = remote::to_wire(full_delivery());
  wc.data = "{not json";
  CAF_CHECK(throws<decode_error>([&] { remote::from_wire(wc); }));
  wc = remote::to_wire(full_delivery());
  wc.command_id = "nope";
  CAF_CHECK(throws<decode_error>([&] { remote::from_wire(wc); }));
  remote::wire_outcome wo;
  wo.kind = 17;
  auto out = remote::from_wire(wo);
  CAF_CHECK(out.kind == outcome_kind::transient);
  CAF_CHECK_EQUAL(out.error_code, "REMOTE_PROTOCOL_ERROR");
  wo.kind = 0;
  wo.result = "[1,";
  out = remote::from_wire(wo);
  CAF_CHECK(out.kind == outcome_kind::transient);
  CAF_CHECK_EQUAL(out.error_code, "REMOTE_PROTOCOL_ERROR");
}

CAF_TEST(a worker refuses offers it cannot use) {
  remote::pool_offer offer;
  offer.node_name = "n1";
  offer.slots = 4;
  offer.heartbeat_ms = 1000;
  CAF_CHECK_EQUAL(remote::refuse_offer(offer, 1, 3000ms), "");
  offer.protocol = 2;
  auto why = remote::refuse_offer(offer, 1, 3000ms);
  CAF_CHECK(why.find("protocol 2") != std::string::npos);
  CAF_CHECK(why.find("speaks 1") != std::string::npos);
  offer.protocol = 1;
  offer.heartbeat_ms = 0;
  CAF_CHECK(remote::refuse_offer(offer, 1, 3000ms).find("no heartbeats")
            != std::string::npos);
  offer.heartbeat_ms = 2000;
  CAF_CHECK(remote::refuse_offer(offer, 1, 3000ms).find("too slow")
            != std::string::npos);
  offer.heartbeat_ms = 1000;
  offer.slots = 0;
  CAF_CHECK(remote::refuse_offer(offer, 1, 3000ms).find("no handler slots")
            != std::string::npos);
}

CAF_TEST(the TLS set is all or nothing and its files must be readable) {
  config::tls_config tls;
  CAF_CHECK(config::validate_tls(tls).empty());
  CAF_CHECK_EQUAL(config::describe_tls(tls), "off");
  auto dir = std::string{"/tmp/cmdbus-tls-test-"} + std::to_string(::getpid());
  std::string mk = "mkdir -p " + dir;
  CAF_REQUIRE_EQUAL(std::system(mk.c_str()), 0);
  auto cert = dir + "/c.pem";
  {
    std::ofstream out{cert};
    out << "x";
  }
  tls.ca_file = cert;
  auto problems = config::validate_tls(tls);
  CAF_REQUIRE_EQUAL(problems.size(), 1u);
  CAF_CHECK(problems[0].find("missing: tls-certificate, tls-key")
            != std::string::npos);
  tls.certificate = cert;
  tls.key = dir + "/missing.key";
  problems = config::validate_tls(tls);
  CAF_REQUIRE_EQUAL(problems.size(), 1u);
  CAF_CHECK(problems[0].find("tls-key") != std::string::npos);
  tls.key = cert;
  tls.passphrase = "secret";
  CAF_CHECK(config::validate_tls(tls).empty());
  CAF_CHECK(config::describe_tls(tls).find("secret") == std::string::npos);
  tls.ca_file.clear();
  tls.ca_path = cert;
  problems = config::validate_tls(tls);
  CAF_REQUIRE_EQUAL(problems.size(), 1u);
  CAF_CHECK(problems[0].find("not a directory") != std::string::npos);
  // configure_network refuses a partial set before CAF sees it.
  caf::actor_system_config cfg;
  config::tls_config partial;
  partial.certificate = cert;
  CAF_CHECK(throws<config::config_error>(
    [&] { actors::configure_network(cfg, {1000ms, partial}); }));
  std::string rm = "rm -rf " + dir;
  CAF_CHECK_EQUAL(std::system(rm.c_str()), 0);
  CAF_CHECK(throws<std::invalid_argument>(
    [] { config::parse_node_address("h:0"); }));
  CAF_CHECK_EQUAL(config::parse_node_address(":7400").host, "127.0.0.1");
}

namespace {

struct lease_state {
  std::shared_ptr<std::atomic<int>> extends;
};

// The worker side's lease: counts the extensions it receives.
remote::lease_actor::behavior_type
lease(remote::lease_actor::stateful_pointer<lease_state> self,
      std::shared_ptr<std::atomic<int>> extends) {
  self->state.extends = std::move(extends);
  return {
    [self](atom::extend, const std::vector<int64_t>& ids, int secs,
           bool) -> int {
      if (ids.size() == 1 && ids[0] == 42 && secs == 7)
        *self->state.extends += 1;
      return static_cast<int>(ids.size());
    },
  };
}

handler_registry node_handlers() {
  handler_registry reg;
  reg.add("payments", "Debit", [](const command& cmd, handler_context& ctx) {
    ctx.extend_visibility(std::chrono::seconds{7});
    return json::parse(R"({"echo":)" + cmd.data.text() + "}");
  });
  reg.add("payments", "Audit",
          [](const command&, handler_context&) { return json::null(); });
  return reg;
}

// Connects to the node at 127.0.0.1:port and says hello for "payments"
// with `lease`: the session (null when refused).
caf::actor session_of(caf::actor_system& sys, uint16_t port,
                      const caf::actor& lease) {
  auto door = sys.middleman().remote_actor<remote::node_door_actor>("127.0.0.1",
                                                                    port);
  if (!door)
    return {};
  caf::actor session;
  caf::scoped_actor self{sys};
  self
    ->request(*door, 5s, atom::hello::value, remote::protocol_version,
              std::string{"w1"}, std::string{"payments"}, lease)
    .receive([&](remote::pool_offer&, caf::actor& s) { session = s; },
             [](caf::error&) {});
  return session;
}

} // namespace

CAF_TEST(a handler node serves a worker over loopback) {
  node_config ncfg;
  ncfg.domains = {"payments"};
  ncfg.concurrency = 2;
  ncfg.listen = "127.0.0.1:0";
  ncfg.name = "n1";
  handler_node node{ncfg, node_handlers()};
  auto port = node.start();
  CAF_REQUIRE(port != 0);
  CAF_CHECK_EQUAL(node.name(), "n1");
  network_system client;
  auto& sys = *client.sys;
  auto door = sys.middleman().remote_actor<remote::node_door_actor>("127.0.0.1",
                                                                    port);
  CAF_REQUIRE(door);
  auto extends = std::make_shared<std::atomic<int>>(0);
  auto lease_hdl = sys.spawn(lease, extends);
  caf::scoped_actor self{sys};
  // Another protocol version: refused with a clear error.
  self
    ->request(*door, 5s, atom::hello::value, int32_t{99}, std::string{"w1"},
              std::string{"payments"}, caf::actor_cast<caf::actor>(lease_hdl))
    .receive([](remote::pool_offer&, caf::actor&) { CAF_FAIL("accepted"); },
             [](caf::error& err) {
               CAF_CHECK_EQUAL(err.category(), actors::ec_category);
               CAF_CHECK_EQUAL(err.code(), static_cast<uint8_t>(
                                             actors::ec::protocol_mismatch));
               auto text = actors::describe(err);
               CAF_CHECK(text.find("speaks protocol 1") != std::string::npos);
               CAF_CHECK(text.find("worker speaks 99") != std::string::npos);
             });
  // A domain the node does not serve.
  self
    ->request(*door, 5s, atom::hello::value, remote::protocol_version,
              std::string{"w1"}, std::string{"orders"},
              caf::actor_cast<caf::actor>(lease_hdl))
    .receive([](remote::pool_offer&, caf::actor&) { CAF_FAIL("accepted"); },
             [](caf::error& err) {
               CAF_CHECK_EQUAL(err.code(), static_cast<uint8_t>(
                                             actors::ec::unknown_domain));
             });
  // The same version: an offer and a session.
  remote::handler_pool_actor pool;
  self
    ->request(*door, 5s, atom::hello::value, remote::protocol_version,
              std::string{"w1"}, std::string{"payments"},
              caf::actor_cast<caf::actor>(lease_hdl))
    .receive(
      [&](remote::pool_offer& offer, caf::actor& session) {
        CAF_CHECK_EQUAL(offer.protocol, remote::protocol_version);
        CAF_CHECK_EQUAL(offer.node_name, "n1");
        CAF_CHECK(offer.command_types
                  == (std::vector<std::string>{"Audit", "Debit"}));
        CAF_CHECK_EQUAL(offer.slots, 2);
        CAF_CHECK_EQUAL(offer.heartbeat_ms, 1000);
        pool = caf::actor_cast<remote::handler_pool_actor>(session);
      },
      [](caf::error& err) { CAF_FAIL("hello refused: " << to_string(err)); });
  CAF_REQUIRE(pool);
  CAF_CHECK_EQUAL(node.status().sessions, 1);
  auto rc = full_delivery();
  self->request(pool, 10s, atom::handle::value, remote::to_wire(rc))
    .receive(
      [&](remote::wire_outcome& wo) {
        auto out = remote::from_wire(wo);
        CAF_CHECK(out.kind == outcome_kind::success);
        CAF_CHECK_EQUAL(out.result.text(), R"({"echo":{"amount":12.50,"to":"x"}})");
        CAF_CHECK(wo.handler_ns > 0);
      },
      [](caf::error& err) { CAF_FAIL("handle failed: " << to_string(err)); });
  // The lease hears of the extension, and the node counts the command,
  // on their own threads: maybe only after the outcome reached us.
  CAF_CHECK(cmdbus::test::eventually([&] { return extends->load() == 1; }, 10s));
  CAF_CHECK(cmdbus::test::eventually([&] { return node.status().completed == 1; }, 10s));
  CAF_CHECK_EQUAL(extends->load(), 1);
  // The worker's lease goes away: its session ends.
  self->monitor(pool);
  self->send_exit(lease_hdl, caf::exit_reason::kill);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(10s) >> [] {});
  CAF_CHECK(down);
  CAF_CHECK(cmdbus::test::eventually([&] { return node.status().sessions == 0; }, 10s));
  node.stop(5s);
}

CAF_TEST(a stopped node ends its sessions) {
  node_config ncfg;
  ncfg.domains = {"payments"};
  ncfg.concurrency = 1;
  ncfg.listen = ":0";
  handler_node node{ncfg, node_handlers()};
  auto port = node.start();
  CAF_CHECK(node.name().find(":" + std::to_string(port)) != std::string::npos);
  network_system client;
  auto& sys = *client.sys;
  auto lease_hdl = sys.spawn(lease, std::make_shared<std::atomic<int>>(0));
  auto session = session_of(sys, port, caf::actor_cast<caf::actor>(lease_hdl));
  CAF_REQUIRE(session);
  caf::scoped_actor self{sys};
  self->monitor(session);
  node.stop(5s);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(10s) >> [] {});
  CAF_CHECK(down);
  // Nobody listens any more.
  auto again = sys.middleman().remote_actor<remote::node_door_actor>(
    "127.0.0.1", port);
  CAF_CHECK(!again);
  self->send_exit(lease_hdl, caf::exit_reason::kill);
}

CAF_TEST(a stopping node finishes running commands and refuses new ones) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto entered = std::make_shared<std::atomic<int>>(0);
  auto stopping = std::make_shared<std::atomic<bool>>(false);
  handler_registry reg;
  reg.add("payments", "Slow", [=](const command&, handler_context& ctx) {
    *entered += 1;
    while (!release->load()) {
      if (ctx.cancelled())
        *stopping = true;
      std::this_thread::sleep_for(5ms);
    }
    return json::parse(ctx.cancelled() ? R"({"cancelled":true})" : "{}");
  });
  node_config ncfg;
  ncfg.domains = {"payments"};
  ncfg.concurrency = 1;
  ncfg.listen = ":0";
  handler_node node{ncfg, std::move(reg)};
  auto port = node.start();
  network_system client;
  auto& sys = *client.sys;
  auto lease_hdl = sys.spawn(lease, std::make_shared<std::atomic<int>>(0));
  auto pool = caf::actor_cast<remote::handler_pool_actor>(
    session_of(sys, port, caf::actor_cast<caf::actor>(lease_hdl)));
  CAF_REQUIRE(pool);
  caf::scoped_actor self{sys};
  auto rc = full_delivery();
  rc.cmd.command_type = "Slow";
  // One command runs, a second one waits for the only handler.
  self->send(pool, atom::handle::value, remote::to_wire(rc));
  self->send(pool, atom::handle::value, remote::to_wire(rc));
  CAF_REQUIRE(cmdbus::test::eventually(
    [&] { return entered->load() >= 1 && node.status().queued >= 1; }, 10s));
  CAF_REQUIRE_EQUAL(node.status().busy, 1);
  CAF_REQUIRE_EQUAL(node.status().queued, 1);
  std::thread stopper{[&] { node.stop(10s); }};
  CAF_REQUIRE(
    cmdbus::test::eventually([&] { return stopping->load(); }, 10s));
  // Once the stop began, a new command is refused at once (one that still
  // slipped in before the pool heard of the stop waits in its queue: its
  // request times out here, and it runs like the others).
  bool refused = false;
  int slipped_in = 0;
  for (int i = 0; i < 20 && !refused; ++i)
    self->request(pool, 500ms, atom::handle::value, remote::to_wire(rc))
      .receive([](remote::wire_outcome&) {},
               [&](caf::error& err) {
                 if (err == caf::sec::request_timeout)
                   ++slipped_in;
                 refused = err.category() == actors::ec_category
                           && err.code()
                                == static_cast<uint8_t>(
                                  actors::ec::remote_unavailable);
               });
  CAF_CHECK(refused);
  // The running and the queued command still finish, and see the stop.
  release->store(true);
  int answered = 0;
  bool saw_cancel = false;
  for (int i = 0; i < 2; ++i)
    self->receive(
      [&](remote::wire_outcome& wo) {
        ++answered;
        saw_cancel = saw_cancel || wo.result == R"({"cancelled":true})";
      },
      caf::after(10s) >> [] {});
  CAF_CHECK_EQUAL(answered, 2);
  CAF_CHECK(saw_cancel);
  stopper.join();
  CAF_CHECK_EQUAL(node.status().busy, 0);
  CAF_CHECK_EQUAL(node.status().completed, 2 + slipped_in);
  self->send_exit(lease_hdl, caf::exit_reason::kill);
}
