// What the `cmdbus` tool says when something is wrong, and its exit codes:
// usage errors with their "(see `cmdbus CMD --help`)" hint once, `help CMD`,
// global --dsn, nearest-name suggestions, an unreachable server (exit 3, one
// line, no reconnect backoff line), refused logins (exit 6, one message per
// reason), a database without our schema (exit 4, "run `cmdbus migrate`"),
// and the same errors as JSON under --json. The binary runs as a child
// process with a clean libpq environment.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto pos = text.find(part); pos != std::string::npos;
       pos = text.find(part, pos + part.size()))
    ++n;
  return n;
}

/// A server address where nothing listens; the password must never show.
const std::string closed_port_dsn = "host=127.0.0.1 port=1 dbname=x user=u "
                                    "password=pw-secret connect_timeout=2";

/// The test server's address parts, for DSNs with one part changed.
struct server {
  std::string port;
  std::string socket_dir;
};

server test_server() {
  auto conn = test::connect();
  return {*scalar(conn, "SELECT inet_server_port()::text"),
          *scalar(conn, "SELECT split_part(current_setting("
                        "'unix_socket_directories'), ',', 1)")};
}

/// Every one-shot command that talks to the database, with valid arguments.
std::vector<std::vector<std::string>> one_shot_commands() {
  return {{"migrate"},
          {"send", "ce_x", "T"},
          {"send", "ce_x", "T", "--create"},
          {"show", "ce_x", test::new_uuid()},
          {"list", "ce_x"},
          {"queues"},
          {"wait", "ce_x", test::new_uuid()},
          {"tsq", "list", "ce_x"},
          {"tsq", "retry", "ce_x", "--all"},
          {"batch", "list", "ce_x"},
          {"stats"},
          {"replies", "ce_x__replies", "--peek"},
          {"worker", "--demo", "--tick", "--domain", "ce_x"}};
}

} // namespace

// -- usage errors and help
// ------------------------------------------------------

TEST(CliErrors, UsageErrorsCarryTheHelpHintOnce) {
  struct usage_case {
    std::vector<std::string> args;
    std::string message;
    std::string hint;
  };
  std::vector<usage_case> cases{
    {{"send", "d", "T", "--bogus"}, "unknown option '--bogus'", "send"},
    {{"send", "d"}, "expected DOMAIN and TYPE", "send"},
    {{"send", "bad-domain", "T"}, "bad-domain", "send"},
    {{"send", "d", "T", "--data", "[1]"},
     "--data must be a JSON object",
     "send"},
    {{"list", "d", "--status", "done"}, "unknown status 'done'", "list"},
    {{"show", "d", "not-a-uuid"}, "not a valid UUID", "show"},
    {{"queues", "extra"}, "positional", "queues"},
    {{"migrate", "--dsn"}, "--dsn needs a value", "migrate"},
    {{"worker", "--bogus"}, "unknown option '--bogus'", "worker"},
    {{"worker", "--domain", "d", "payments"}, "unexpected argument", "worker"},
    {{"worker", "--concurrency", "0", "--domain", "d"},
     "concurrency",
     "worker"},
  };
  for (auto& c : cases) {
    auto r = run_cmdbus(c.args);
    auto shown = c.args[0] + " " + c.args[1];
    EXPECT_EQ(r.exit_code, 1) << shown << ": " << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << shown << ": " << r.err;
    EXPECT_EQ(occurrences(r.err, "(see `cmdbus " + c.hint + " --help`)"), 1u)
      << shown << ": " << r.err;
    EXPECT_EQ(occurrences(r.err, "(see "), 1u) << shown << ": " << r.err;
    EXPECT_EQ(occurrences(r.err, "--help"), 1u) << shown << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << shown << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << shown << ": " << r.out;
  }
}

TEST(CliErrors, HelpCommandShowsTheCommandsHelp) {
  for (std::string cmd : {"send", "list", "migrate", "worker"}) {
    auto help = run_cmdbus({"help", cmd});
    auto own = run_cmdbus({cmd, "--help"});
    EXPECT_EQ(help.exit_code, 0) << cmd << ": " << help.err;
    EXPECT_FALSE(help.out.empty()) << cmd;
    EXPECT_EQ(help.out, own.out) << cmd;
  }
  auto r = run_cmdbus({"help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "Exit codes:")) << r.out;
  r = run_cmdbus({"help", "sned"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(
    r.err, "unknown command 'sned'; did you mean send? (see `cmdbus --help`)"))
    << r.err;
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
}

TEST(CliErrors, UnknownNamesSuggestTheNearest) {
  auto r = run_cmdbus({"sned", "d", "T"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cmdbus: unknown command 'sned'; did you mean send? (see "
                   "`cmdbus --help`)\n");
  r = run_cmdbus({"frobnicate"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cmdbus: unknown command 'frobnicate' (see `cmdbus "
                   "--help`)\n");
  r = run_cmdbus({"list", "d", "--stauts", "PENDING"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cmdbus: unknown option '--stauts'; did you mean "
                   "--status? (see `cmdbus list --help`)\n");
  r = run_cmdbus({"tsq", "list", "d", "--oldest"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cmdbus: unknown option '--oldest'; did you mean "
                   "--oldest-first? (see `cmdbus tsq --help`)\n");
  r = run_cmdbus({"worker", "--concurency", "4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cmdbus: unknown option '--concurency'; did you mean "
                   "--concurrency? (see `cmdbus worker --help`)\n");
  // A global option before the command; its value is never shown.
  r = run_cmdbus({"--dns=host=x password=hunter2", "queues"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "cmdbus: unknown option '--dns'; did you mean --dsn? (see "
                   "`cmdbus --help`)\n");
}

TEST(CliErrors, DsnAndJsonAreAcceptedBeforeTheCommand) {
  auto r = run_cmdbus({"--dsn", test::dsn(), "queues", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.front(), '[') << r.out;
  r = run_cmdbus({"--dsn=" + test::dsn(), "list", test::unique_name("ce")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Before the command it counts like after it: a closed port fails.
  r = run_cmdbus({"--dsn", closed_port_dsn, "queues"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  // So does --json, for the output and for errors.
  r = run_cmdbus({"--json", "--dsn", test::dsn(), "list",
                  test::unique_name("ce")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[]\n");
  r = run_cmdbus({"--json", "queues", "--dsn", closed_port_dsn});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out.rfind("{\"error\":", 0), 0u) << r.out;
  // Commands with subcommands take them too, before the command or before
  // the subcommand.
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--dsn", test::dsn(), "--json", "batch",
                                 "list", test::unique_name("ce")},
        {"--json", "--dsn", test::dsn(), "tsq", "list", test::unique_name("ce")},
        {"batch", "--dsn", test::dsn(), "--json", "list",
         test::unique_name("ce")},
        {"tsq", "--json", "--dsn", test::dsn(), "list",
         test::unique_name("ce")}}) {
    r = run_cmdbus(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << " " << args[3] << ": " << r.err;
    ASSERT_FALSE(r.out.empty());
    EXPECT_TRUE(r.out.front() == '[' || r.out.front() == '{') << r.out;
  }
  // A global --dsn without its value says so.
  r = run_cmdbus({"--dsn"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "--dsn needs a value")) << r.err;
}

// -- a mistyped domain -----------------------------------------------------------

TEST(CliErrors, AnEmptyListingOfADomainWithoutQueueSaysSo) {
  auto typo = test::unique_name("ce");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"list", typo},
        {"tsq", "list", typo},
        {"batch", "list", typo}}) {
    args.insert(args.end(), {"--dsn", test::dsn()});
    auto r = run_cmdbus(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "there is no queue " + typo + "__commands"))
      << args[0] << ": " << r.err;
  }
  // A real domain that is merely quiet gets no note.
  auto quiet = test::unique_name("ce");
  auto r = run_cmdbus({"send", quiet, "T", "--create", "--dsn", test::dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (std::vector<std::string> args :
       {std::vector<std::string>{"tsq", "list", quiet},
        {"batch", "list", quiet}}) {
    args.insert(args.end(), {"--dsn", test::dsn()});
    r = run_cmdbus(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    EXPECT_EQ(r.err, "") << args[0];
  }
}

// -- connection failures
// --------------------------------------------------------

TEST(CliErrors, ClosedPortSaysSoOnceAndExitsThree) {
  for (auto args : one_shot_commands()) {
    args.insert(args.end(), {"--dsn", closed_port_dsn});
    auto r = run_cmdbus(args);
    EXPECT_EQ(r.exit_code, 3) << args[0] << ": " << r.err;
    EXPECT_FALSE(crashed(r)) << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << args[0] << ": " << r.err;
    EXPECT_EQ(occurrences(r.err, "cannot connect to u@127.0.0.1:1/x"), 1u)
      << args[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "Connection refused; Is the server running"))
      << r.err;
    EXPECT_TRUE(contains(r.err, "(check host and port in --dsn")) << r.err;
    EXPECT_FALSE(contains(r.err, "next attempt")) << args[0] << ": " << r.err;
    EXPECT_FALSE(contains(r.err, "pw-secret")) << r.err;
    EXPECT_TRUE(r.out.empty()) << args[0] << ": " << r.out;
  }
}

TEST(CliErrors, RefusedLoginsExitSixWithTheirOwnMessage) {
  auto s = test_server();
  auto tcp = "host=127.0.0.1 port=" + s.port;
  struct login_case {
    std::string dsn;
    std::string server_says;
    std::string advice;
  };
  std::vector<login_case> cases{
    {tcp + " user=cmdbus password=wrong-pw dbname=cmdbus_test",
     "password authentication failed for user \"cmdbus\"",
     "the server refused the password"},
    // The unix socket trusts local users: there the server names an
    // unknown role (over TCP password authentication hides it).
    {"host=" + s.socket_dir + " port=" + s.port
       + " user=ce_nobody password=wrong-pw dbname=cmdbus_test",
     "role \"ce_nobody\" does not exist", "the server knows no such user"},
    {tcp + " user=cmdbus password=cmdbus dbname=ce_no_such_db",
     "database \"ce_no_such_db\" does not exist",
     "the database does not exist on that server"},
  };
  for (auto& c : cases) {
    for (auto args : one_shot_commands()) {
      args.insert(args.end(), {"--dsn", c.dsn});
      auto r = run_cmdbus(args);
      EXPECT_EQ(r.exit_code, 6) << args[0] << ": " << r.err;
      EXPECT_TRUE(contains(r.err, c.server_says)) << args[0] << ": " << r.err;
      EXPECT_TRUE(contains(r.err, c.advice)) << args[0] << ": " << r.err;
      EXPECT_EQ(line_count(r.err), 1u) << args[0] << ": " << r.err;
      EXPECT_FALSE(contains(r.err, "wrong-pw")) << r.err;
      EXPECT_FALSE(contains(r.err, "next attempt")) << r.err;
    }
  }
}

// -- a database without our schema
// ---------------------------------------------

TEST(CliErrors, UnmigratedDatabaseSaysRunMigrate) {
  test::scratch_database scratch;
  for (auto args : one_shot_commands()) {
    if (args[0] == "migrate")
      continue;
    args.insert(args.end(), {"--dsn", scratch.dsn()});
    auto r = run_cmdbus(args);
    EXPECT_EQ(r.exit_code, 4) << args[0] << ": " << r.err;
    EXPECT_EQ(r.err, "cmdbus: the database has no cmdbus schema (it was never "
                     "migrated): run `cmdbus migrate` first\n")
      << args[0];
  }
  // After the migration the same database works.
  auto r = run_cmdbus({"migrate", "--dsn", scratch.dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cmdbus({"list", "ce_x", "--dsn", scratch.dsn()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(CliErrors, DatabaseWithPgmqButNoCommandbusSchemaSaysRunMigrate) {
  test::scratch_database scratch;
  {
    auto conn = db::connection::open(scratch.dsn());
    db::migrate(conn, sql::pgmq_files(), {});
  }
  // PGMQ works here: queues and the queue check do; what needs our
  // schema says what to do.
  for (std::vector<std::string> args :
       {std::vector<std::string>{"send", "ce_x", "T", "--create"},
        {"show", "ce_x", test::new_uuid()},
        {"list", "ce_x"},
        {"worker", "--demo", "--tick", "--domain", "ce_x"}}) {
    args.insert(args.end(), {"--dsn", scratch.dsn()});
    auto r = run_cmdbus(args);
    EXPECT_EQ(r.exit_code, 4) << args[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "run `cmdbus migrate` first"))
      << args[0] << ": " << r.err;
    EXPECT_FALSE(contains(r.err, "does not exist")) << r.err;
  }
}

// -- errors under --json
// --------------------------------------------------------

TEST(CliErrors, ErrorsUnderJsonAreJsonOnStdout) {
  auto conn = test::connect();
  struct json_case {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  };
  std::vector<json_case> cases{
    {{"list", "d", "--stauts", "x"}, 1, "did you mean --status?"},
    {{"show", test::unique_name("ce"), test::new_uuid(), "--dsn", test::dsn()},
     2,
     "not found"},
    {{"queues", "--dsn", closed_port_dsn}, 3, "cannot connect"},
    {{"worker", "--demo", "--tick", "--domain", test::unique_name("ce"),
      "--dsn", test::dsn()},
     2,
     "--create"},
  };
  for (auto& c : cases) {
    c.args.push_back("--json");
    auto r = run_cmdbus(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args[0] << ": " << r.out;
    EXPECT_TRUE(r.err.empty()) << c.args[0] << ": " << r.err;
    EXPECT_EQ(line_count(r.out), 1u) << r.out;
    EXPECT_EQ(jget(conn, r.out, "{exit_code}"),
              opt_str{std::to_string(c.exit_code)})
      << r.out;
    auto error = jget(conn, r.out, "{error}");
    ASSERT_TRUE(error) << r.out;
    EXPECT_TRUE(contains(*error, c.message)) << *error;
    EXPECT_FALSE(contains(r.out, "pw-secret")) << r.out;
  }
}
