// cmdbus over TLS to PostgreSQL with sslmode=verify-full, and passwords
// kept off command lines and out of every output: a private server that
// takes TCP connections over TLS only (tests/support/tls_server.hpp), one
// for the whole suite.
//
// - `cmdbus send-batch` and a `cmdbus worker` complete commands over TLS,
//   the worker's TLS connections cut (a tcp_proxy that the TLS bytes pass
//   through), the server restarted and the worker killed with kill -9 in
//   between: nothing lost, nothing run twice;
// - a wrong CA, a certificate for another host name, a server without TLS
//   and a DSN without TLS for a server that demands it are each refused
//   with one line that says what to fix;
// - the password comes from a DSN file (--dsn-file, $CMDBUS_DSN_FILE, the
//   worker's `dsn-file` key) or from libpq's password file (PGPASSFILE); a
//   DSN file that others may read is refused; and the password shows in
//   no output, log or error message.

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/tls_server.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Writes `content` to `name` in `dir` with mode `mode` and returns its
/// path.
std::string
write_file(const temp_dir& dir, const std::string& name,
           const std::string& content,
           fs::perms mode = fs::perms::owner_read | fs::perms::owner_write) {
  auto path = dir.write(name, content);
  fs::permissions(path, mode);
  return path;
}

/// `count` lines of demo `Test` commands for send-batch, each taking
/// `duration_ms` (0: none).
std::string test_commands(int count, int duration_ms = 0) {
  std::string behavior = duration_ms > 0 ? R"({"min_duration_ms": )"
                                             + std::to_string(duration_ms)
                                             + R"(, "max_duration_ms": )"
                                             + std::to_string(duration_ms) + "}"
                                         : "{}";
  std::string lines;
  for (int i = 0; i < count; ++i)
    lines += R"({"command_type": "Test", "data": {"behavior": )" + behavior
             + "}}\n";
  return lines;
}

/// Commands of `domain` with a COMPLETED audit row, and those with more
/// than one.
struct completions {
  int64_t commands = 0;
  int64_t twice = 0;
};

completions completed(db::connection& c, const std::string& domain) {
  auto r = c.query("SELECT count(*), count(*) FILTER (WHERE n > 1) FROM "
                   "(SELECT command_id, count(*) AS n FROM commandbus.audit "
                   "WHERE domain = $1 AND event_type = 'COMPLETED' GROUP BY "
                   "command_id) t",
                   domain);
  return {r.int64(0, 0), r.int64(0, 1)};
}

} // namespace

class PostgresTls : public ::testing::Test {
protected:
  /// One server for the suite (starting one takes seconds), migrated over
  /// TLS with the password from a DSN file.
  static void SetUpTestSuite() {
    try {
      server_ = std::make_unique<tls_server>();
      files_ = std::make_unique<temp_dir>();
      auto dsn_file = write_file(*files_, "migrate.dsn",
                                 server_->dsn()
                                   + " password=" + server_->password() + "\n");
      auto r = run_cmdbus({"migrate", "--dsn-file", dsn_file});
      if (r.exit_code != 0)
        setup_error_ = "cmdbus migrate over TLS failed: " + r.err + r.out;
    } catch (const std::exception& e) {
      setup_error_ = e.what();
    }
  }

  static void TearDownTestSuite() {
    files_.reset();
    server_.reset();
  }

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  /// A wrong CA, a certificate for another name, a server without TLS and
  /// a DSN without TLS for a server that demands it: each refused with one
  /// line that says what to fix, by the tool and by a worker.
  void refusals_say_what_to_fix();

  /// The password from libpq's password file or from a DSN file (every
  /// place that names one); a DSN file open to others refused; the
  /// password in no output.
  void passwords_come_from_files_only_their_owner_reads();

  /// The server's DSN (through `port`, 0: direct) with its password.
  static std::string dsn_with_password(int port = 0) {
    return server_->dsn(port) + " password=" + server_->password();
  }

  static std::unique_ptr<tls_server> server_;
  static std::unique_ptr<temp_dir> files_;
  static std::string setup_error_;
};

std::unique_ptr<tls_server> PostgresTls::server_;
std::unique_ptr<temp_dir> PostgresTls::files_;
std::string PostgresTls::setup_error_;

TEST_F(PostgresTls, WorkerCompletesEverythingThroughACutARestartAndAKill) {
  auto& pg = *server_;
  temp_dir dir;
  tcp_proxy proxy{pg.port()};
  // The worker's TLS connections run through the proxy; send-batch and the
  // test's checks go straight to the server. Each DSN file ends in a
  // newline, as an editor writes it.
  auto worker_dsn = write_file(dir, "worker.dsn",
                               dsn_with_password(proxy.port()) + "\n");
  auto send_dsn = write_file(dir, "send.dsn", dsn_with_password() + "\r\n");
  auto d = unique_name("tls");
  auto send = [&](int count, int duration_ms = 0) {
    auto file = dir.write("commands.jsonl", test_commands(count, duration_ms));
    auto r = run_cmdbus(
      {"send-batch", d, "--file", file, "--create", "--dsn-file", send_dsn});
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  };
  std::vector<std::string> worker_args{"worker",   "--demo",
                                       "--create", "--domain",
                                       d,          "--dsn-file",
                                       worker_dsn, "--concurrency",
                                       "4",        "--visibility-timeout",
                                       "2s",       "--statement-timeout",
                                       "1s",       "--poll-interval",
                                       "100ms",    "--error-backoff-max",
                                       "200ms",    "--log-level",
                                       "debug"};
  auto checks = db::connection::open(pg.socket_dsn());
  auto all_completed = [&](int64_t n) {
    return [&checks, &d, n] { return completed(checks, d).commands >= n; };
  };
  std::string outputs;
  auto worker = std::make_unique<background_cmdbus>(worker_args);
  auto stop_worker = [&] {
    auto r = worker->stop(30s);
    outputs += r ? r->out + r->err : "(the worker did not stop)\n";
    return r;
  };
  // What a failed wait shows: the worker's output and the server's log.
  auto failed = [&] {
    stop_worker();
    return outputs + pg.logs();
  };

  // The plain path over TLS.
  send(40);
  ASSERT_TRUE(eventually(all_completed(40))) << failed();

  // The TLS connections cut: commands sent meanwhile complete once the
  // network is back.
  proxy.cut();
  send(40);
  proxy.restore();
  ASSERT_TRUE(eventually(all_completed(80))) << failed();

  // A server restart (immediate: every connection drops as in a crash).
  pg.restart();
  checks = db::connection::open(pg.socket_dsn());
  send(40);
  ASSERT_TRUE(eventually(all_completed(120))) << failed();

  // kill -9 of the worker while it runs commands: another worker takes
  // them over once their leases end.
  send(40, 50);
  // Some are read and running (claimed, or deferred and still PENDING):
  // their messages are hidden.
  ASSERT_TRUE(eventually([&] {
    return checks
             .query("SELECT count(*) FROM pgmq.\"q_" + d
                    + "__commands\" WHERE read_ct > 0 AND vt > "
                      "clock_timestamp()")
             .int64(0, 0)
           > 0;
  })) << failed();
  worker->signal(SIGKILL);
  auto killed = worker->wait(10s);
  ASSERT_TRUE(killed.has_value());
  outputs += killed->out + killed->err;
  worker = std::make_unique<background_cmdbus>(worker_args);
  ASSERT_TRUE(eventually(all_completed(160), 30s)) << failed();
  auto stopped = stop_worker();
  ASSERT_TRUE(stopped.has_value()) << outputs;
  EXPECT_EQ(stopped->exit_code, 0) << outputs;

  // Nothing lost, nothing completed twice.
  auto done = completed(checks, d);
  EXPECT_EQ(done.commands, 160);
  EXPECT_EQ(done.twice, 0);
  EXPECT_EQ(count_status(checks, d, "COMPLETED"), 160);
  // The worker logged its reconnections at debug level, never the
  // password.
  EXPECT_TRUE(contains(outputs, "connected to cmdbus@localhost:")) << outputs;
  EXPECT_FALSE(contains(outputs, pg.password())) << outputs;
}

void PostgresTls::refusals_say_what_to_fix() {
  auto& pg = *server_;
  temp_dir dir;
  struct refusal {
    const char* name;
    std::string dsn;
    /// What libpq says, and what we add.
    std::string reason;
    std::string advice;
    int exit_code;
  };
  auto other_host = dsn_with_password();
  other_host.replace(0, std::string{"host=localhost"}.size(),
                     "host=db.example");
  auto plain_dsn = dsn_with_password();
  plain_dsn.replace(plain_dsn.find("sslmode=verify-full"),
                    std::string{"sslmode=verify-full"}.size(),
                    "sslmode=disable");
  std::vector<refusal> refusals{
    {"wrong CA", dsn_with_password() + " sslrootcert=" + pg.other_ca_file(),
     "certificate verify failed",
     "set sslrootcert in the DSN to the file of the CA that signed it", 3},
    {"certificate for another name", other_host,
     "server certificate for \"localhost\" does not match host name "
     "\"db.example\"",
     "connect with the name it is for", 3},
    {"a server without TLS",
     test::dsn() + " sslmode=verify-full sslrootcert=" + pg.ca_file(),
     "server does not support SSL, but SSL was required",
     "the server does not speak TLS", 3},
    {"no TLS for a server that demands it", plain_dsn, "no encryption",
     "add sslmode=verify-full and sslrootcert=CA-FILE to the DSN", 6},
  };
  for (auto& r : refusals) {
    auto file = write_file(dir, "refused.dsn", r.dsn + "\n");
    for (std::vector<std::string> args :
         {std::vector<std::string>{"queues", "--dsn-file", file},
          {"worker", "--demo", "--domain", "tls_refused", "--dsn-file",
           file}}) {
      auto res = run_cmdbus(args);
      EXPECT_EQ(res.exit_code, r.exit_code) << r.name << ": " << res.err;
      EXPECT_EQ(line_count(res.err), 1u) << r.name << ": " << res.err;
      EXPECT_TRUE(contains(res.err, r.reason)) << r.name << ": " << res.err;
      EXPECT_TRUE(contains(res.err, r.advice)) << r.name << ": " << res.err;
      EXPECT_FALSE(contains(res.err + res.out, pg.password()))
        << r.name << ": " << res.err;
    }
  }
}

void PostgresTls::passwords_come_from_files_only_their_owner_reads() {
  auto& pg = *server_;
  temp_dir dir;
  auto secret = pg.password();
  auto d = unique_name("tls");
  // libpq's password file: a DSN without a password connects.
  auto passfile = write_file(dir, "pgpass",
                             "*:" + std::to_string(pg.port())
                               + ":*:cmdbus:" + secret + "\n");
  auto r = run_cmdbus({"queues", "--dsn", pg.dsn()},
                      {"PGPASSFILE=" + passfile});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Without it, the refusal names where a password may come from.
  r = run_cmdbus({"queues", "--dsn", pg.dsn()},
                 {"PGPASSFILE=" + dir.file("none")});
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_TRUE(contains(r.err, "no password supplied")) << r.err;
  EXPECT_TRUE(contains(r.err, "the password file")) << r.err;

  // A DSN file: with --dsn-file, before or after the command (winning over
  // the environment's $CMDBUS_DSN), and with $CMDBUS_DSN_FILE.
  auto dsn_file = write_file(dir, "cmdbus.dsn", dsn_with_password() + "\n");
  auto closed = "CMDBUS_DSN=host=127.0.0.1 port=1 dbname=x user=u password="
                + secret;
  for (auto& run : {run_cmdbus({"queues", "--dsn-file", dsn_file}, {closed}),
                    run_cmdbus({"--dsn-file=" + dsn_file, "queues"}),
                    run_cmdbus({"queues"}, {"CMDBUS_DSN_FILE=" + dsn_file}),
                    run_cmdbus({"worker", "--demo", "--tick", "--create",
                                "--domain", d, "--dsn-file", dsn_file},
                               {closed}),
                    run_cmdbus({"worker", "--demo", "--tick", "--domain", d},
                               {"CMDBUS_DSN_FILE=" + dsn_file})}) {
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_FALSE(contains(run.out + run.err, secret)) << run.out << run.err;
  }
  // One place gives a DSN or a DSN file, not both.
  for (auto& run :
       {run_cmdbus({"queues", "--dsn-file", dsn_file, "--dsn", pg.dsn()}),
        run_cmdbus({"worker", "--demo", "--domain", d, "--dsn-file", dsn_file,
                    "--dsn", pg.dsn()})}) {
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_TRUE(contains(run.err, "give --dsn or --dsn-file, not both"))
      << run.err;
  }
  // The worker's config file names it with `dsn-file`.
  auto config = dir.write("worker.ini", "dsn-file = \"" + dsn_file
                                          + "\"\n[worker]\ndomains = [\"" + d
                                          + "\"]\n");
  r = run_cmdbus(
    {"worker", "--demo", "--tick", "--config", config, "--log-level", "debug"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.out + r.err, secret)) << r.out << r.err;

  // A DSN file that its group or others may read is refused, by the tool
  // and by the worker, wherever it is named; its content never shows.
  auto open_file = write_file(dir, "open.dsn", dsn_with_password() + "\n",
                              fs::perms::owner_read | fs::perms::owner_write
                                | fs::perms::group_read
                                | fs::perms::others_read);
  for (auto& run : {run_cmdbus({"queues", "--dsn-file", open_file}),
                    run_cmdbus({"queues"}, {"CMDBUS_DSN_FILE=" + open_file}),
                    run_cmdbus({"worker", "--demo", "--domain", d, "--dsn-file",
                                open_file}),
                    run_cmdbus({"worker", "--demo", "--domain", d},
                               {"CMDBUS_DSN_FILE=" + open_file})}) {
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_EQ(line_count(run.err), 1u) << run.err;
    EXPECT_TRUE(contains(run.err, "its group or others have access (mode "
                                  "0644)"))
      << run.err;
    EXPECT_TRUE(contains(run.err, "chmod 600")) << run.err;
    EXPECT_FALSE(contains(run.out + run.err, secret)) << run.err;
  }

  // A wrong password from a DSN file: refused, and neither password shows.
  auto wrong = write_file(dir, "wrong.dsn",
                          pg.dsn() + " password=wrong-" + secret + "\n");
  r = run_cmdbus({"queues", "--dsn-file", wrong});
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_TRUE(contains(r.err, "password authentication failed")) << r.err;
  EXPECT_FALSE(contains(r.out + r.err, secret)) << r.err;
}

// One test for both (ctest starts a process, and so a server, per test).
TEST_F(PostgresTls, RefusalsSayWhatToFixAndPasswordsStayInOwnersFiles) {
  refusals_say_what_to_fix();
  passwords_come_from_files_only_their_owner_reads();
}
