// `cmdbus worker --exec TYPE=COMMAND` against the real database: the stock
// binary runs programs (Python and shell) for each outcome, hands them the
// command and only the environment it is told to, extends the lease of a
// program that outlives the visibility timeout, and loses nothing when its
// connections are cut or when it is killed (-9) while a program runs; and
// examples/exec runs as its documentation says.

#include <gtest/gtest.h>

#include <csignal>
#include <fstream>

#include "tests/db/background_cmdbus.hpp"
#include "tests/support/process.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

/// Commands of `domain` with more than one COMPLETED audit row.
int64_t completed_twice(db::connection& c, const std::string& domain) {
  return c
    .query("SELECT count(*) FROM (SELECT command_id FROM commandbus.audit "
           "WHERE domain = $1 AND event_type = 'COMPLETED' GROUP BY "
           "command_id HAVING count(*) > 1) t",
           domain)
    .int64(0, 0);
}

/// The reply to `id` among the messages of `queue`, or "".
std::string reply_to(db::connection& c, const std::string& queue,
                     const uuid& id) {
  for (auto& m : messages(c, queue))
    if (jget(c, m, "{command_id}") == id.to_string())
      return m;
  return {};
}

send_request req(const std::string& domain, const std::string& type,
                 const std::string& data = "{}", int max_attempts = 3) {
  auto r = make_req(domain, type, data);
  r.reply_to = domain + "__replies";
  r.max_attempts = max_attempts;
  return r;
}

// The Python handler: echoes its input and the names of its environment;
// with data.fail_first it fails its first attempt as a transient failure.
constexpr const char* echo_py = R"(import json, os, sys
doc = json.load(sys.stdin)
if doc["data"].get("fail_first") and doc["attempt"] < 2:
    print("not yet", file=sys.stderr)
    sys.exit(75)
json.dump({"input": doc, "env": sorted(os.environ)}, sys.stdout)
)";

// A business rule with its error document on standard output.
constexpr const char* rule_sh = R"(cat > /dev/null
echo '{"code": "NO_FUNDS", "message": "the balance is too low"}'
exit 65
)";

} // namespace

TEST(ExecWorker, TheStockWorkerRunsProgramsForEachOutcome) {
  bus_env e;
  auto d = unique_name("ex");
  auto replies = d + "__replies";
  temp_dir dir;
  auto echo = dir.write("echo.py", echo_py);
  auto rule = dir.write("rule.sh", rule_sh);
  auto ok_req = req(d, "Echo", R"({"n": 1})");
  ok_req.correlation_id = uuid::random();
  auto ok = e.bus.send(ok_req).command_id;
  auto retried
    = e.bus.send(req(d, "Echo", R"({"fail_first": true})")).command_id;
  auto refused = e.bus.send(req(d, "Rule")).command_id;
  auto crashed = e.bus.send(req(d, "Crash")).command_id;
  auto missing = e.bus.send(req(d, "Missing")).command_id;
  auto stubborn = e.bus.send(req(d, "Stubborn", "{}", 1)).command_id;
  auto long_run = e.bus.send(req(d, "Long")).command_id;

  // The DSN and a password are in the worker's environment; the programs
  // get PATH and REGION only.
  auto r = run_cmdbus({"worker",
                       "--tick",
                       "--domain",
                       d,
                       "--concurrency",
                       "8",
                       "--visibility-timeout",
                       "1",
                       "--statement-timeout",
                       "500ms",
                       "--backoff",
                       "0",
                       "--exec",
                       "Echo=python3 " + echo,
                       "--exec",
                       "Rule=sh " + rule,
                       "--exec",
                       "Crash=sh -c 'echo boom >&2; exit 2'",
                       "--exec",
                       "Missing=/nonexistent/handler",
                       "--exec",
                       "Stubborn=sh -c \"trap '' TERM; sleep 30\"",
                       "--exec-timeout",
                       "Stubborn=300ms",
                       "--exec-kill-grace",
                       "200ms",
                       "--exec",
                       "Long=sh -c 'cat > /dev/null; sleep 2.5'",
                       "--exec-env",
                       "PATH",
                       "--exec-env",
                       "REGION",
                       "--json"},
                      {"CMDBUS_DSN=" + dsn(), "PGPASSWORD=secret",
                       "REGION=eu"});
  // Exit 5: commands went to the troubleshooting queue.
  EXPECT_EQ(r.exit_code, 5) << r.err;

  // Success: the program's output is the result; it read the command.
  EXPECT_TRUE(has_status(e.conn, d, ok, "COMPLETED"))
    << status_of(e.conn, d, ok).value_or("?") << "\n" << r.err << r.out;
  auto reply = reply_to(e.conn, replies, ok);
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(jget(e.conn, reply, "{result,input,command_id}"), ok.to_string());
  EXPECT_EQ(jget(e.conn, reply, "{result,input,command_type}"), "Echo");
  EXPECT_EQ(jget(e.conn, reply, "{result,input,domain}"), d);
  EXPECT_EQ(jget(e.conn, reply, "{result,input,data,n}"), "1");
  EXPECT_EQ(jget(e.conn, reply, "{result,input,attempt}"), "1");
  EXPECT_EQ(jget(e.conn, reply, "{result,input,max_attempts}"), "3");
  EXPECT_EQ(jget(e.conn, reply, "{result,input,correlation_id}"),
            ok_req.correlation_id->to_string());
  EXPECT_EQ(jget(e.conn, reply, "{result,input,reply_to}"), replies);
  auto env = jget(e.conn, reply, "{result,env}").value_or("");
  EXPECT_NE(env.find("\"REGION\""), std::string::npos) << env;
  EXPECT_NE(env.find("\"PATH\""), std::string::npos) << env;
  EXPECT_EQ(env.find("PGPASSWORD"), std::string::npos) << env;
  EXPECT_EQ(env.find("CMDBUS"), std::string::npos) << env;

  // Exit 75: retried, and the second attempt succeeds.
  EXPECT_TRUE(has_status(e.conn, d, retried, "COMPLETED"));
  EXPECT_EQ(attempts_of(e.conn, d, retried), 2);
  EXPECT_EQ(jget(e.conn, reply_to(e.conn, replies, retried),
                 "{result,input,attempt}"),
            "2");

  // Exit 65 with an error document: a business rule failure.
  EXPECT_TRUE(has_status(e.conn, d, refused, "FAILED"));
  EXPECT_EQ(column(e.conn, d, refused, "last_error_code"), "NO_FUNDS");
  EXPECT_EQ(column(e.conn, d, refused, "last_error_msg"),
            "the balance is too low");

  // Another status: permanent, with the end of standard error.
  EXPECT_TRUE(has_status(e.conn, d, crashed, "IN_TROUBLESHOOTING_QUEUE"));
  EXPECT_EQ(column(e.conn, d, crashed, "last_error_code"), "EXEC_FAILED");
  EXPECT_NE(column(e.conn, d, crashed, "last_error_msg")
              .value_or("")
              .find("exited with status 2: boom"),
            std::string::npos);

  // A program that cannot start: permanent, with the OS error.
  EXPECT_TRUE(has_status(e.conn, d, missing, "IN_TROUBLESHOOTING_QUEUE"));
  EXPECT_EQ(column(e.conn, d, missing, "last_error_code"), "EXEC_NOT_STARTED");
  EXPECT_NE(column(e.conn, d, missing, "last_error_msg")
              .value_or("")
              .find("No such file or directory (ENOENT)"),
            std::string::npos);

  // Past its timeout, ignoring SIGTERM: killed, a transient failure (its
  // one attempt used up: the troubleshooting queue).
  EXPECT_TRUE(has_status(e.conn, d, stubborn, "IN_TROUBLESHOOTING_QUEUE"));
  EXPECT_EQ(column(e.conn, d, stubborn, "last_error_code"), "EXEC_TIMEOUT");
  EXPECT_NE(column(e.conn, d, stubborn, "last_error_msg")
              .value_or("")
              .find("SIGKILL after 200 ms"),
            std::string::npos);

  // Running 2.5 times its visibility timeout: the lease heartbeat kept the
  // message, so it ran once.
  EXPECT_TRUE(has_status(e.conn, d, long_run, "COMPLETED"));
  EXPECT_EQ(attempts_of(e.conn, d, long_run), 1);
  EXPECT_EQ(count_events(e.conn, d, long_run, "RECEIVED"), 1);
}

TEST(ExecWorker, LosesNothingToACutConnectionOrAWorkerKilledMidProgram) {
  bus_env e;
  auto d = unique_name("ex");
  temp_dir dir;
  auto port = e.conn.exec("SELECT current_setting('port')");
  tcp_proxy proxy{std::stoi(std::string{port.text(0, 0)})};
  auto proxied = dsn() + " host=127.0.0.1 port=" + std::to_string(proxy.port())
                 + " connect_timeout=2";
  std::vector<uuid> work;
  for (int i = 0; i < 200; ++i)
    work.push_back(e.bus.send(req(d, "Work")).command_id);
  // Hold writes its process id, then runs until it is killed.
  auto pid_file = dir.file("hold.pid");
  auto hold = dir.write("hold.sh", "cat > /dev/null\necho $$ > '" + pid_file
                                     + ".tmp'\nmv '" + pid_file + ".tmp' '"
                                     + pid_file + "'\nexec sleep 60\n");
  pid_t hold_pid = 0;
  finally kill_hold{[&] {
    if (hold_pid > 0)
      ::kill(hold_pid, SIGKILL);
  }};
  std::vector<std::string> common{"--domain",
                                  d,
                                  "--visibility-timeout",
                                  "2",
                                  "--statement-timeout",
                                  "1s",
                                  "--backoff",
                                  "0",
                                  "--exec",
                                  "Work=/bin/cat"};
  {
    auto args = std::vector<std::string>{"worker",         "--dsn", proxied,
                                         "--concurrency",  "4",     "--exec",
                                         "Hold=sh " + hold};
    args.insert(args.end(), common.begin(), common.end());
    background_cmdbus w{args};
    // 1. Its connections are cut twice while programs run.
    for (int cut = 1; cut <= 2; ++cut) {
      auto before = count_status(e.conn, d, "COMPLETED");
      ASSERT_TRUE(eventually(
        [&] { return count_status(e.conn, d, "COMPLETED") > before + 10; },
        30s))
        << "no progress before cut " << cut;
      proxy.cut();
      proxy.restore();
    }
    EXPECT_TRUE(eventually(
      [&] { return all_have_status(e.conn, d, work, "COMPLETED"); }, 60s))
      << count_status(e.conn, d, "COMPLETED") << " of 200 completed";
    EXPECT_EQ(completed_twice(e.conn, d), 0);
    // Each result is the program's output: here its input.
    EXPECT_EQ(jget(e.conn, reply_to(e.conn, d + "__replies", work[7]),
                   "{result,command_id}"),
              work[7].to_string());

    // 2. Killed (-9) while a program runs.
    auto held = e.bus.send(req(d, "Hold")).command_id;
    ASSERT_TRUE(eventually([&] {
      std::ifstream in{pid_file};
      return static_cast<bool>(in >> hold_pid) && hold_pid > 0;
    }));
    w.signal(SIGKILL);
    auto end = w.wait(30s);
    ASSERT_TRUE(end);
    EXPECT_EQ(end->exit_code, 128 + SIGKILL);
    // Not final: IN_PROGRESS, or still PENDING when its claim was deferred
    // and no heartbeat came before the kill (docs/worker.md).
    EXPECT_TRUE(has_status(e.conn, d, held, "IN_PROGRESS")
                || has_status(e.conn, d, held, "PENDING"));

    // Another worker gets the command once its lease runs out (its
    // program this time ends at once).
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!has_status(e.conn, d, held, "COMPLETED")) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      auto tick = std::vector<std::string>{
        "worker", "--tick", "--dsn", dsn(), "--exec", "Hold=/bin/true"};
      tick.insert(tick.end(), common.begin(), common.end());
      auto r = run_cmdbus(tick);
      ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 5) << r.err;
    }
    EXPECT_EQ(attempts_of(e.conn, d, held), 2);
    EXPECT_EQ(count_events(e.conn, d, held, "COMPLETED"), 1);
  }
}

TEST(ExecWorker, TheExampleRunsItsPythonHandlerAsDocumented) {
  // examples/exec as its README and docs/exec.md tell a new user to run it:
  // from the repository's root, `cmdbus worker --config
  // examples/exec/worker.ini`, the stock binary running greet.py. Its
  // domain is the example's own, so only this test's commands are checked.
  bus_env e;
  const std::string d = "greetings";
  auto replies = d + "__replies";
  auto ada = e.bus.send(req(d, "Greet", R"({"name": "Ada"})")).command_id;
  auto nameless = e.bus.send(req(d, "Greet", "{}")).command_id;
  auto r = run_process(
    {"/bin/sh", "-c",
     std::string{"cd '"} + CMDBUS_SOURCE_DIR + "' && exec '" + CMDBUS_BINARY
       + "' worker --config examples/exec/worker.ini --tick --json"},
    {"CMDBUS_DSN=" + dsn(), "CMDBUS_CONFIG=", "CMDBUS_DOMAINS=",
     "CMDBUS_DSN_FILE="});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(has_status(e.conn, d, ada, "COMPLETED"))
    << status_of(e.conn, d, ada).value_or("?") << "\n" << r.err;
  auto reply = reply_to(e.conn, replies, ada);
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(jget(e.conn, reply, "{result,greeting}"), "Hello, Ada!");
  EXPECT_EQ(jget(e.conn, reply, "{result,command_id}"), ada.to_string());
  // Its business rule: exit 65 with an error document.
  EXPECT_TRUE(has_status(e.conn, d, nameless, "FAILED"));
  EXPECT_EQ(column(e.conn, d, nameless, "last_error_code"), "NAME_REQUIRED");
}
