// The `cmdbus worker` command line: a tick with the demo handler (--demo)
// and its JSON counters, what a tick leaves for later (exit code 5), domains
// whose queue does not exist (exit code 2 unless --create), usage errors and
// an unreachable database (exit codes 1 and 3, no password in the output),
// and the refusal of domains it has no handlers for (without --demo).
// The binary runs as a child process with a clean environment.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "tests/support/process.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

// -- `cmdbus worker --tick` ---------------------------------------------------

TEST(WorkerCli, TickReportsWhatIsLeftForLater) {
  // A transient failure whose retry is due in a minute stays in the queue:
  // the tick ends with exit code 5 and says so.
  bus_env e;
  auto d = test::unique_name("wkcli");
  auto req = make_req(d, "Test", R"({"behavior":{"fail_transient_pct":100}})");
  e.bus.send(req);
  e.bus.send(make_req(d, "Test"));
  auto r = test::run_cmdbus({"worker", "--demo", "--tick", "--domain", d,
                             "--dsn", test::dsn(), "--json", "--backoff",
                             "60"});
  ASSERT_EQ(r.exit_code, 5) << r.err;
  auto line = last_line(r.out);
  EXPECT_EQ(jget(e.conn, line, "{completed}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{retried}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{remaining}"), opt_str{"1"}) << line;
  r = test::run_cmdbus({"worker", "--demo", "--tick", "--domain", d, "--dsn",
                        test::dsn(), "--backoff", "60"});
  ASSERT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.out.find("remaining in the queue 1 (not due yet"),
            std::string::npos)
    << r.out;
}

TEST(WorkerCli, TickRunsTheDemoHandlerAndPrintsJsonCounters) {
  bus_env e;
  auto d = test::unique_name("wkcli");
  auto reply_q = d + "__replies";
  auto ok_req = make_req(d, "Test", R"({"behavior":{"result":{"ok":1}}})");
  ok_req.reply_to = reply_q;
  auto ok = e.bus.send(ok_req);
  auto perm = e.bus.send(
    make_req(d, "Test", R"({"behavior":{"fail_permanent_pct":100}})"));
  auto rule_req = make_req(
    d, "Test",
    R"({"behavior":{"fail_business_rule_pct":100,"error_code":"LIMIT"}})");
  rule_req.reply_to = reply_q;
  auto rule = e.bus.send(rule_req);
  auto trans_req
    = make_req(d, "Test", R"({"behavior":{"fail_transient_pct":100}})");
  trans_req.max_attempts = 2;
  auto trans = e.bus.send(trans_req);
  auto r = test::run_cmdbus({"worker", "--demo", "--tick", "--domain", d,
                             "--dsn", test::dsn(), "--json", "--max-attempts",
                             "3", "--backoff", "0"});
  // Exit 5: two commands went to the troubleshooting queue.
  ASSERT_EQ(r.exit_code, 5) << r.err;
  // The last stdout line is the JSON counters.
  auto line = last_line(r.out);
  EXPECT_EQ(jget(e.conn, line, "{received}"), opt_str{"5"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{completed}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{retried}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{moved_to_tsq}"), opt_str{"2"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{failed}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{rejected}"), opt_str{"0"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{in_flight}"), opt_str{"0"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{remaining}"), opt_str{"0"}) << line;
  EXPECT_EQ(status_of(e.conn, d, ok.command_id), opt_str{"COMPLETED"});
  EXPECT_EQ(status_of(e.conn, d, perm.command_id),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  EXPECT_EQ(column(e.conn, d, perm.command_id, "last_error_code"),
            opt_str{"DEMO_PERMANENT"});
  EXPECT_EQ(status_of(e.conn, d, rule.command_id), opt_str{"FAILED"});
  EXPECT_EQ(column(e.conn, d, rule.command_id, "last_error_code"),
            opt_str{"LIMIT"});
  EXPECT_EQ(status_of(e.conn, d, trans.command_id),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});
  EXPECT_EQ(attempts_of(e.conn, d, trans.command_id), 2);
  EXPECT_EQ(
    audit_detail(e.conn, d, trans.command_id, "MOVED_TO_TSQ", "{reason}"),
    opt_str{"EXHAUSTED"});
  // One reply each; the handlers ran concurrently, so in either order.
  auto replies = messages(e.conn, reply_q);
  ASSERT_EQ(replies.size(), 2u);
  if (jget(e.conn, replies[0], "{outcome}") != opt_str{"SUCCESS"})
    std::swap(replies[0], replies[1]);
  EXPECT_EQ(jget(e.conn, replies[0], "{outcome}"), opt_str{"SUCCESS"});
  EXPECT_EQ(jget(e.conn, replies[0], "{command_id}"),
            opt_str{ok.command_id.to_string()});
  EXPECT_TRUE(jeq(e.conn, replies[0], "{result}", R"({"ok":1})"));
  EXPECT_EQ(jget(e.conn, replies[1], "{outcome}"), opt_str{"FAILED"});
  EXPECT_EQ(jget(e.conn, replies[1], "{command_id}"),
            opt_str{rule.command_id.to_string()});
  EXPECT_EQ(jget(e.conn, replies[1], "{error_code}"), opt_str{"LIMIT"});
  EXPECT_EQ(queue_rows(e.conn, queue_of(d)), 0);
}

TEST(WorkerCli, TickExitsZeroWhenEveryCommandCompleted) {
  bus_env e;
  auto d = test::unique_name("wkcli");
  auto ok = e.bus.send(make_req(d, "Test", R"({"behavior":{"outcome":"success"}})"));
  auto r = test::run_cmdbus({"worker", "--demo", "--tick", "--domain", d,
                             "--dsn", test::dsn(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto line = last_line(r.out);
  EXPECT_EQ(jget(e.conn, line, "{completed}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{moved_to_tsq}"), opt_str{"0"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{remaining}"), opt_str{"0"}) << line;
  EXPECT_EQ(status_of(e.conn, d, ok.command_id), opt_str{"COMPLETED"});
  // Nothing to do at all is a success too.
  r = test::run_cmdbus(
    {"worker", "--demo", "--tick", "--domain", d, "--dsn", test::dsn()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(WorkerCli, TickExitsFiveWhenACommandWentToTheTsq) {
  bus_env e;
  auto d = test::unique_name("wkcli");
  auto perm = e.bus.send(
    make_req(d, "Test", R"({"behavior":{"outcome":"permanent"}})"));
  auto r = test::run_cmdbus({"worker", "--demo", "--tick", "--domain", d,
                             "--dsn", test::dsn(), "--json"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  auto line = last_line(r.out);
  EXPECT_EQ(jget(e.conn, line, "{moved_to_tsq}"), opt_str{"1"}) << line;
  EXPECT_EQ(jget(e.conn, line, "{remaining}"), opt_str{"0"}) << line;
  EXPECT_EQ(status_of(e.conn, d, perm.command_id),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});
}

TEST(WorkerCli, MissingQueuesAreRefusedUnlessCreate) {
  bus_env e;
  auto known = test::unique_name("wkcli");
  auto missing = test::unique_name("wkcli");
  e.bus.ensure_queue(queue_of(known));
  auto queue_exists = [&](const std::string& domain) {
    return scalar(e.conn,
                  "SELECT count(*) FROM pgmq.meta WHERE queue_name = $1",
                  queue_of(domain))
           == opt_str{"1"};
  };
  auto r = test::run_cmdbus({"worker", "--demo", "--tick", "--domain", known,
                             "--domain", missing, "--dsn", test::dsn()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "cmdbus: queue " + queue_of(missing)
                     + " does not exist: check the domain's spelling, or "
                       "pass --create to create it\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_FALSE(queue_exists(missing));
  // The domains of a config file are checked the same way.
  auto file = (std::filesystem::temp_directory_path()
               / (test::unique_name("wkcli") + ".ini"))
                .string();
  finally remove_file{[&] { std::remove(file.c_str()); }};
  std::ofstream{file} << "[worker]\ndomains = [\"" << known << "\", \""
                      << missing << "\"]\n";
  r = test::run_cmdbus(
    {"worker", "--demo", "--tick", "--config", file, "--dsn", test::dsn()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.err.find(queue_of(missing)) != std::string::npos) << r.err;
  EXPECT_FALSE(queue_exists(missing));
  // --create creates them, and the tick runs.
  r = test::run_cmdbus({"worker", "--demo", "--tick", "--config", file, "--dsn",
                        test::dsn(), "--create"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(queue_exists(missing));
}

// -- usage and errors ---------------------------------------------------------

TEST(WorkerCli, HelpUsageAndUnreachableDatabase) {
  auto r = test::run_cmdbus({"worker", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--tick"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--domain"), std::string::npos);

  r = test::run_cmdbus({"worker", "--domain", "wk_cli", "--bogus-option"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("bogus-option"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;

  r = test::run_cmdbus({"worker", "--demo", "--tick", "--domain", "wk_cli",
                        "--dsn",
                        "host=127.0.0.1 port=1 user=cmdbus password=secret "
                        "dbname=nowhere connect_timeout=2"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(r.err.find("secret"), std::string::npos) << r.err;
}

// -- domains without handlers -------------------------------------------------

namespace {

/// A DSN nothing listens on: a worker that tried to connect would exit
/// with 3, so exit code 1 proves it never did.
const char* closed_port_dsn = "host=127.0.0.1 port=1 user=cmdbus "
                              "dbname=nowhere connect_timeout=2";

} // namespace

TEST(WorkerCli, RefusesDomainsWithoutHandlersBeforeConnecting) {
  auto r = test::run_cmdbus(
    {"worker", "--tick", "--domain", "wk_refused", "--dsn", closed_port_dsn});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no handlers for domain 'wk_refused'"),
            std::string::npos)
    << r.err;
  EXPECT_NE(r.err.find("HandlerNotFoundError"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--demo"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("examples/payments"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // Every refused domain is named, from a config file too, and under
  // --json the refusal is JSON.
  auto file = (std::filesystem::temp_directory_path()
               / (test::unique_name("wkcli") + ".ini"))
                .string();
  finally remove_file{[&] { std::remove(file.c_str()); }};
  std::ofstream{file} << "[worker]\ndomains = [\"wk_a\", \"wk_b\"]\n";
  r = test::run_cmdbus({"worker", "--config", file, "--dsn", closed_port_dsn,
                        "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("no handlers for domains 'wk_a', 'wk_b'"),
            std::string::npos)
    << r.out;
  EXPECT_NE(r.out.find("\"exit_code\":1"), std::string::npos) << r.out;
}

TEST(WorkerCli, HelpAndDumpConfigNeedNoHandlers) {
  auto r = test::run_cmdbus({"worker", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--demo"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("usage: cmdbus worker"), std::string::npos) << r.out;
  r = test::run_cmdbus({"help", "worker"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--demo"), std::string::npos) << r.out;
  r = test::run_cmdbus({"--help"});
  EXPECT_NE(r.out.find("--demo"), std::string::npos) << r.out;
  r = test::run_cmdbus({"worker", "--dump-config", "--domain", "wk_dump"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wk_dump"), std::string::npos) << r.out;
}

TEST(WorkerCli, DemoServesTheDemoHandlersFromAConfigFile) {
  bus_env e;
  auto d = test::unique_name("wkcli");
  auto ok = make_req(d, "Test", R"({"behavior":{"outcome":"success"}})");
  e.bus.send(ok);
  auto file = (std::filesystem::temp_directory_path()
               / (test::unique_name("wkcli") + ".ini"))
                .string();
  finally remove_file{[&] { std::remove(file.c_str()); }};
  std::ofstream{file} << "[worker]\ndomains = [\"" << d << "\"]\n";
  auto r = test::run_cmdbus(
    {"worker", "--demo", "--tick", "--config", file, "--dsn", test::dsn()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(status_of(e.conn, d, ok.command_id), opt_str{"COMPLETED"});
}
