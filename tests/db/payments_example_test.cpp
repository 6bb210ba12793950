// The payments example (examples/payments) end to end: payments-worker, a
// program built on cmdbus::worker_main with a function handler, an actor
// handler and a process type, serves a domain; payments-send, built on the
// send API only, sends two commands and starts a Payment process. The
// commands and the process complete, a refused fraud check reverses its
// Debit, and the worker's /healthz answers. Also: the worker program's own
// name in its help, version and errors; and payments-node, a handler node
// built on cmdbus::node_main, running the Debits of a worker that has no
// handler for them.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/db/background_cmdbus.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

#if defined(PAYMENTS_WORKER_BINARY) && defined(PAYMENTS_SEND_BINARY)

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

// Runs one of the example's programs without the caller's cmdbus settings.
process_result run(const std::string& binary,
                   const std::vector<std::string>& args) {
  std::vector<std::string> argv{binary};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {"CMDBUS_DSN=", "CMDBUS_CONFIG=", "CMDBUS_DOMAINS=",
                            "CMDBUS_LOG_FORMAT=", "CMDBUS_LOG_LEVEL="});
}

struct sent {
  std::string debit;
  std::string fraud_check;
  std::string payment;
};

// Runs payments-send --json; returns the ids it printed.
sent send(db::connection& c, const std::string& domain, int64_t cents) {
  auto r = run(PAYMENTS_SEND_BINARY,
               {"--dsn", test::dsn(), "--domain", domain, "--amount",
                std::to_string(cents), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  return {jget(c, r.out, "{debit}").value_or(""),
          jget(c, r.out, "{fraud_check}").value_or(""),
          jget(c, r.out, "{payment}").value_or("")};
}

// The status of a command (`what` = "command") or a process ("process").
opt_str status_of(db::connection& c, const std::string& what,
                  const std::string& domain, const std::string& id) {
  return scalar(c,
                "SELECT status::text FROM commandbus." + what
                  + " WHERE domain = $1 AND " + what + "_id = $2::uuid",
                domain, id);
}

} // namespace

TEST(PaymentsExample, WorkerServesWhatTheSenderSends) {
  bus_env env;
  auto domain = unique_name("pay");
  auto port = free_port();
  background_cmdbus worker{{"--domain", domain, "--dsn", test::dsn(),
                            "--create", "--http",
                            "127.0.0.1:" + std::to_string(port), "--backoff",
                            "0", "--poll-interval", "100ms", "--quiet"},
                           {},
                           PAYMENTS_WORKER_BINARY};
  ASSERT_TRUE(
    eventually([&] { return http_get(port, "/readyz").status == 200; }, 30s))
    << "payments-worker did not get ready: " << worker.stop(5s).value().err;

  // Within the limit: both commands and the process complete.
  auto ok = send(env.conn, domain, 2500);
  EXPECT_TRUE(eventually(
    [&] {
      return status_of(env.conn, "command", domain, ok.debit) == "COMPLETED"
             && status_of(env.conn, "command", domain, ok.fraud_check)
                  == "COMPLETED"
             && status_of(env.conn, "process", domain, ok.payment)
                  == "COMPLETED";
    },
    30s))
    << status_of(env.conn, "command", domain, ok.debit).value_or("none") << " "
    << status_of(env.conn, "command", domain, ok.fraud_check).value_or("none")
    << " "
    << status_of(env.conn, "process", domain, ok.payment).value_or("none");
  // The process got the Debit function's answer as the step's reply.
  EXPECT_EQ(scalar(env.conn,
                   "SELECT count(*) FROM commandbus.process_audit"
                   " WHERE domain = $1 AND process_id = $2::uuid"
                   " AND step_name = 'Debit' AND reply_outcome = 'SUCCESS'"
                   " AND reply_data::text LIKE '%D-' || command_id || '%'",
                   domain, ok.payment),
            opt_str{"1"});

  // Above the limit: the actor refuses (a business-rule failure), and the
  // process reverses its Debit and ends CANCELED.
  auto refused = send(env.conn, domain, 250000);
  EXPECT_TRUE(eventually(
    [&] {
      return status_of(env.conn, "command", domain, refused.fraud_check)
               == "FAILED"
             && status_of(env.conn, "process", domain, refused.payment)
                  == "CANCELED";
    },
    30s))
    << status_of(env.conn, "command", domain, refused.fraud_check)
         .value_or("none")
    << " "
    << status_of(env.conn, "process", domain, refused.payment).value_or("none");
  EXPECT_EQ(scalar(env.conn,
                   "SELECT string_agg(step_name, ',' ORDER BY id)"
                   " FROM commandbus.process_audit"
                   " WHERE domain = $1 AND process_id = $2::uuid",
                   domain, refused.payment),
            opt_str{"Debit,FraudCheck,ReverseDebit"});

  auto health = http_get(port, "/healthz");
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_NE(health.body.find("\"status\":\"HEALTHY\""), std::string::npos)
    << health.body;

  auto r = worker.stop();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->exit_code, 0) << r->err;
}

TEST(PaymentsExample, WorkerProgramSpeaksUnderItsOwnName) {
  auto r = run(PAYMENTS_WORKER_BINARY, {"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("usage: payments-worker [options]", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("FraudCheck (an\nactor)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--config FILE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--http"), std::string::npos) << r.out;

  r = run(PAYMENTS_WORKER_BINARY, {"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("payments-worker (cmdbus ", 0), 0u) << r.out;

  r = run(PAYMENTS_WORKER_BINARY, {"--domain", "pay_x", "--concurency", "4"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("payments-worker: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("--concurrency"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(see `payments-worker --help`)"), std::string::npos)
    << r.err;

  // The log options and the database's exit codes are the tool's.
  r = run(PAYMENTS_WORKER_BINARY,
          {"--tick", "--domain", "pay_x", "--log-format", "journal", "--dsn",
           "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=2"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  r = run(PAYMENTS_WORKER_BINARY, {"--log-format", "xml", "--domain", "x"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("text, json or journal"), std::string::npos) << r.err;
}

TEST(PaymentsExample, SenderNeedsNoActorLibrary) {
  // payments-send links the client library only: no CAF at run time.
  auto r = run_process({"/bin/sh", "-c",
                        std::string{"ldd '"} + PAYMENTS_SEND_BINARY
                          + "' | grep -c libcaf || true"});
  EXPECT_EQ(r.out, "0\n") << r.out << r.err;
  r = run(PAYMENTS_SEND_BINARY, {"--bogus"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("unknown argument '--bogus'"), std::string::npos)
    << r.err;
}

#ifdef PAYMENTS_NODE_BINARY
TEST(PaymentsExample, NodeRunsTheDebitsOfAWorkerWithoutThem) {
  bus_env env;
  auto domain = unique_name("payn");
  env.bus.ensure_queue(queue_of(domain));
  auto port_file = (std::filesystem::temp_directory_path()
                    / (unique_name("payments_node") + ".port"))
                     .string();
  // The node has no database settings at all.
  background_cmdbus node{{"--domain", domain, "--listen", "127.0.0.1:0",
                          "--port-file", port_file, "--heartbeat", "500ms"},
                         {"PGHOST=/nonexistent", "PGDATABASE=none"},
                         PAYMENTS_NODE_BINARY};
  int node_port = 0;
  ASSERT_TRUE(eventually(
    [&] {
      std::ifstream in{port_file};
      return static_cast<bool>(in >> node_port) && node_port > 0;
    },
    20s))
    << "payments-node did not start: " << node.stop(5s).value().err;
  std::filesystem::remove(port_file);

  // `cmdbus worker` has no Debit handler: with the node as its remote pool
  // it serves the domain, and the Debits run on the node.
  background_cmdbus worker{{"worker", "--domain", domain, "--dsn", test::dsn(),
                            "--remote-pool",
                            "127.0.0.1:" + std::to_string(node_port),
                            "--remote-heartbeat-interval", "500ms",
                            "--poll-interval", "100ms", "--quiet"}};
  auto req = make_req(domain, "Debit",
                      R"({"account":"A-1","amount_cents":1250})");
  auto id = env.bus.send(req).command_id.to_string();
  EXPECT_TRUE(eventually(
    [&] {
      return status_of(env.conn, "command", domain, id) == "COMPLETED";
    },
    30s))
    << status_of(env.conn, "command", domain, id).value_or("none");

  auto w = worker.stop();
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->exit_code, 0) << w->err;
  auto n = node.stop();
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->exit_code, 0) << n->err;
}
#endif

#endif
