// `cmdbus tsq`: output, --json, and every error path with its exit code.

#include <pwd.h>
#include <unistd.h>

#include <thread>

#include "tests/db/tsq_support.hpp"
#include "tests/support/eventually.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

using TsqCli = TsqTest;

TEST_F(TsqCli, HelpNamesEverySubcommand) {
  for (auto args : std::vector<std::vector<std::string>>{
         {"tsq", "--help"}, {"tsq", "retry", "--help"}, {"help", "tsq"}}) {
    auto r = run_cmdbus(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (auto word : {"list", "show", "retry", "cancel", "complete",
                      "--dry-run", "Exit codes"})
      EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
}

TEST_F(TsqCli, ListShowsTheItemsAndParsesAsJson) {
  park_spec spec;
  spec.type = "ChargeCard";
  spec.error_code = "CARD_DECLINED";
  auto id = park(spec);
  auto r = cli({"tsq", "list", d});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(id.to_string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CARD_DECLINED"), std::string::npos);
  r = cli({"tsq", "list", d, "--json", "--type", "ChargeCard"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(conn, r.out, "{total}"), opt_str{"1"}) << r.out;
  EXPECT_EQ(jget(conn, r.out, "{items,0,command_id}"), opt_str{id.to_string()});
  EXPECT_EQ(jget(conn, r.out, "{items,0,payload,data,amount}"), opt_str{"100"});
  r = cli({"tsq", "list", d, "--json", "--type", "Other"});
  EXPECT_EQ(jget(conn, r.out, "{total}"), opt_str{"0"}) << r.out;
  r = cli({"tsq", "list", d, "--json", "--error-code", "CARD_DECLINED",
           "--older-than", "1d"});
  EXPECT_EQ(jget(conn, r.out, "{total}"), opt_str{"0"}) << r.out;
}

TEST_F(TsqCli, ShowPrintsPayloadAndErrors) {
  park_spec spec;
  spec.exhausted = true;
  spec.error_code = "TIMEOUT";
  auto id = park(spec);
  auto r = cli({"tsq", "show", d, id.to_string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("EXHAUSTED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"amount\":100"), std::string::npos) << r.out;
  r = cli({"tsq", "show", d, id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(conn, r.out, "{errors,0,event_type}"), opt_str{"FAILED"});
  EXPECT_EQ(jget(conn, r.out, "{errors,1,reason}"), opt_str{"EXHAUSTED"});
  EXPECT_EQ(jget(conn, r.out, "{item,status}"),
            opt_str{"IN_TROUBLESHOOTING_QUEUE"});
}

TEST_F(TsqCli, NamedCommandsAreProcessedAndMissingOnesExitTwo) {
  auto a = park();
  auto b = park();
  auto sent = env.bus.send(make_req(d)); // PENDING
  auto unknown = uuid::random();
  auto r = cli({"tsq", "cancel", d, a.to_string(), unknown.to_string(),
                sent.command_id.to_string(), b.to_string(), "--reason", "x"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(unknown.to_string() + " not found"), std::string::npos)
    << r.err;
  EXPECT_NE(r.err.find("is not in the troubleshooting queue (status PENDING)"),
            std::string::npos)
    << r.err;
  EXPECT_NE(r.out.find("cancel: 4 matched, 2 done, 1 skipped, 1 not found, 0 failed"),
            std::string::npos)
    << r.out;
  EXPECT_EQ(status(a), opt_str{"CANCELED"});
  EXPECT_EQ(status(b), opt_str{"CANCELED"});

  // A single one, again: not in the TSQ any more.
  r = cli({"tsq", "retry", d, a.to_string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not in the troubleshooting queue (status CANCELED)"),
            std::string::npos)
    << r.err;
  r = cli({"tsq", "retry", d, unknown.to_string(), "--json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(jget(conn, r.out, "{results,0,outcome}"), opt_str{"not_found"})
    << r.out;
  EXPECT_EQ(jget(conn, r.out, "{skipped}"), opt_str{"0"});
  EXPECT_EQ(jget(conn, r.out, "{not_found}"), opt_str{"1"});
}

TEST_F(TsqCli, RetryPrintsTheNewMessage) {
  // Parked first: a retried message would be the next one read.
  auto id = park();
  auto other = park();
  auto third = park();
  auto r = cli({"tsq", "retry", d, id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(conn, r.out, "{results,0,outcome}"), opt_str{"done"});
  EXPECT_EQ(jget(conn, r.out, "{results,0,new_msg_id}"),
            column(conn, d, id, "msg_id"));
  // $USER is the default operator; without $USER and $LOGNAME, the name of
  // the account the tool runs as.
  r = run_cmdbus({"tsq", "retry", d, other.to_string()},
                 {"CMDBUS_DSN=" + dsn(), "USER=", "LOGNAME="});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("retried " + other.to_string() + " (new msg_id "),
            std::string::npos)
    << r.out;
  const passwd* account = getpwuid(geteuid());
  ASSERT_NE(account, nullptr);
  EXPECT_EQ(audit_detail(conn, d, other, "OPERATOR_RETRY", "{operator}"),
            opt_str{account->pw_name});
  r = run_cmdbus({"tsq", "retry", d, third.to_string()},
                 {"CMDBUS_DSN=" + dsn(), "USER=nightshift"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(audit_detail(conn, d, third, "OPERATOR_RETRY", "{operator}"),
            opt_str{"nightshift"});
}

TEST_F(TsqCli, UsageErrorsExitOne) {
  auto id = park();
  struct bad {
    std::vector<std::string> args;
    std::string says;
  };
  for (auto& x : std::vector<bad>{
         {{"tsq"}, "missing subcommand"},
         {{"tsq", "frob", d}, "unknown tsq subcommand"},
         {{"tsq", "retry", d, "not-a-uuid"}, "COMMAND_ID"},
         {{"tsq", "retry", d}, "name the commands to retry"},
         {{"tsq", "cancel", d, id.to_string(), "--all"}, "exclude each other"},
         {{"tsq", "retry", d, id.to_string(), "--older-than", "1h"},
          "--older-than"},
         {{"tsq", "complete", d, "--all", "--result", "{nope"},
          "--result is not valid JSON"},
         {{"tsq", "complete", d, "--all", "--result", "[1]"},
          "--result must be a JSON object"},
         {{"tsq", "list", d, "--older-than", "soon"}, "--older-than"},
         {{"tsq", "list", "bad-domain"}, "bad-domain"},
         {{"tsq", "show", d}, "DOMAIN and COMMAND_ID"},
         {{"tsq", "retry", d, "--all", "--reason", "x"}, "--reason"},
       }) {
    auto r = cli(x.args);
    EXPECT_EQ(r.exit_code, 1) << x.args.back() << ": " << r.err;
    EXPECT_NE(r.err.find(x.says), std::string::npos) << r.err;
  }
  EXPECT_EQ(status(id), opt_str{"IN_TROUBLESHOOTING_QUEUE"});
}

TEST_F(TsqCli, ErrorsUnderJsonAreJson) {
  auto r = cli({"tsq", "show", d, uuid::random().to_string(), "--json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(jget(conn, r.out, "{exit_code}"), opt_str{"2"}) << r.out;
  EXPECT_NE(jget(conn, r.out, "{error}").value_or("").find("not found"),
            std::string::npos);
  r = cli({"tsq", "retry", d, "not-a-uuid", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(jget(conn, r.out, "{exit_code}"), opt_str{"1"}) << r.out;
  r = cli({"tsq", "retry", d, "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(jget(conn, r.out, "{exit_code}"), opt_str{"1"}) << r.out;
}

TEST_F(TsqCli, DatabaseUnavailableExitsThree) {
  auto r = run_cmdbus({"tsq", "list", d},
                      {"CMDBUS_DSN=host=127.0.0.1 port=1 user=x "
                       "dbname=x connect_timeout=2"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
}

// Two `cmdbus tsq` processes on one command, both waiting behind a
// transaction that holds the row lock: exactly one succeeds, the other exits
// 2 with "not in the troubleshooting queue".
TEST_F(TsqCli, OfTwoConcurrentProcessesExactlyOneSucceeds) {
  auto id = park();
  auto app = unique_name("tsqcli");
  auto holder = connect();
  holder.exec("BEGIN");
  holder.query("SELECT 1 FROM commandbus.command WHERE domain = $1 AND "
               "command_id = $2::uuid FOR UPDATE",
               d, id.to_string());
  auto env_vars = std::vector<std::string>{"CMDBUS_DSN=" + dsn()
                                           + " application_name=" + app};
  process_result a, b;
  std::thread ta{[&] {
    a = run_cmdbus({"tsq", "cancel", d, id.to_string(), "--reason", "a"},
                   env_vars);
  }};
  std::thread tb{[&] {
    b = run_cmdbus({"tsq", "complete", d, id.to_string()}, env_vars);
  }};
  bool both_waited = eventually([&] {
    return scalar(conn,
                  "SELECT count(*) FROM pg_stat_activity WHERE "
                  "application_name = $1 AND wait_event_type = 'Lock'",
                  app)
           == opt_str{"2"};
  });
  holder.exec("COMMIT");
  ta.join();
  tb.join();
  EXPECT_TRUE(both_waited);
  EXPECT_EQ(a.exit_code + b.exit_code, 2) << a.err << b.err;
  auto& loser = a.exit_code == 2 ? a : b;
  EXPECT_NE(loser.err.find("is not in the troubleshooting queue"),
            std::string::npos)
    << loser.err;
  EXPECT_EQ(count_events(conn, d, id, "OPERATOR_CANCEL")
              + count_events(conn, d, id, "OPERATOR_COMPLETE"),
            1);
}

} // namespace
