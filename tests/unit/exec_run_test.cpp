// Running external programs (actors/exec): the runner's pipes, limits,
// signals, environment and descriptors; what a run means for its command
// (exit statuses, error documents, output); and thousands of runs that
// leave no descriptor and no zombie behind.

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "cmdbus/actors/exec/exec_handler.hpp"
#include "cmdbus/actors/exec/exec_outcome.hpp"
#include "cmdbus/actors/exec/spawn_process.hpp"
#include "cmdbus/model/errors.hpp"

using namespace cmdbus;
using namespace cmdbus::exec;
using namespace std::chrono_literals;

namespace {

using words = std::vector<std::string>;

program_result sh(const std::string& script, std::string_view input = {},
                  program_limits limits = {}) {
  return run_program({"/bin/sh", "-c", script}, {"PATH=/usr/bin:/bin"}, input,
                     limits);
}

/// The descriptors this process has open.
size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] auto& e :
       std::filesystem::directory_iterator{"/proc/self/fd"})
    ++n;
  return n;
}

/// The children of this process that ended and were never reaped.
size_t zombie_children() {
  size_t n = 0;
  auto self = std::to_string(::getpid());
  for (auto& e : std::filesystem::directory_iterator{"/proc"}) {
    std::ifstream in{e.path() / "stat"};
    std::string line;
    if (!std::getline(in, line))
      continue;
    // pid (comm) state ppid ...: comm may hold blanks, the last ')' ends it.
    auto close = line.rfind(')');
    if (close == std::string::npos)
      continue;
    std::istringstream rest{line.substr(close + 2)};
    std::string state, ppid;
    rest >> state >> ppid;
    if (state == "Z" && ppid == self)
      ++n;
  }
  return n;
}

template <class Error>
Error thrown_by(const program_result& r, program_limits limits = {}) {
  try {
    to_result(r, {"T", "prog", limits});
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another error: " << e.what();
  }
  ADD_FAILURE() << "no error";
  return Error{"", ""};
}

program_result exited(int status, std::string out = {}, std::string err = {}) {
  program_result r;
  r.end = program_end::exited;
  r.exit_status = status;
  r.out = std::move(out);
  r.err = std::move(err);
  return r;
}

} // namespace

// -- the runner --------------------------------------------------------------

TEST(ExecRun, passes_input_and_collects_both_outputs_and_the_status) {
  auto r = sh("cat; echo oops >&2; exit 3", "{\"a\": 1}");
  EXPECT_EQ(r.end, program_end::exited);
  EXPECT_EQ(r.exit_status, 3);
  EXPECT_EQ(r.out, "{\"a\": 1}");
  EXPECT_EQ(r.err, "oops\n");
  // More than a pipe holds, both ways at once.
  std::string big(3 << 20, 'x');
  auto echo = sh("cat", big, {60s, 5s, 4 << 20});
  EXPECT_EQ(echo.exit_status, 0);
  EXPECT_EQ(echo.out.size(), big.size());
  EXPECT_FALSE(echo.out_cut);
}

TEST(ExecRun, cuts_output_beyond_the_limit_and_survives_unread_input) {
  // The program writes 5 MB and reads none of its 2 MB of input: it ends
  // normally, 1 KiB of each output is kept, and the write to its closed
  // input raises no SIGPIPE here.
  std::string input(2 << 20, 'i');
  auto r = sh("head -c 5000000 /dev/zero; head -c 5000000 /dev/zero >&2", input,
              {60s, 5s, 1024});
  EXPECT_EQ(r.end, program_end::exited);
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.out.size(), 1024u);
  EXPECT_EQ(r.err.size(), 1024u);
  EXPECT_TRUE(r.out_cut);
  EXPECT_TRUE(r.err_cut);
}

TEST(ExecRun, stops_a_program_at_its_timeout_with_sigterm_then_sigkill) {
  // SIGINT and SIGTERM are blocked in this thread, as in every thread of a
  // worker: the program still gets a clean signal mask, so SIGTERM ends it
  // (with a kill grace of a minute, SIGKILL would come far later).
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  auto term = sh("sleep 30", {}, {50ms, 60s, 1024});
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_EQ(term.end, program_end::timed_out);
  EXPECT_EQ(term.signal, SIGTERM);
  // One that ignores SIGTERM gets SIGKILL after the grace.
  auto kill = sh("trap '' TERM; echo ready; sleep 30 & wait; sleep 30", {},
                 {100ms, 100ms, 1024});
  EXPECT_EQ(kill.end, program_end::timed_out);
  EXPECT_EQ(kill.signal, SIGKILL);
  EXPECT_EQ(kill.out, "ready\n");
  // The cancel flag ends it the same way.
  std::atomic<bool> cancel{false};
  std::thread flip{[&] { cancel = true; }};
  auto cancelled = run_program({"/bin/sleep", "30"}, {}, {}, {60s, 5s, 1024},
                               [&] { return cancel.load(); });
  flip.join();
  EXPECT_EQ(cancelled.end, program_end::cancelled);
  EXPECT_EQ(cancelled.signal, SIGTERM);
}

TEST(ExecRun, waits_for_the_program_not_for_what_it_left_running) {
  // The program exits while a child of its own keeps its output open: the
  // run ends with the program (not at its 20 s timeout).
  auto r = sh("sleep 60 & echo done", {}, {20s, 1s, 1024});
  EXPECT_EQ(r.end, program_end::exited);
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.out, "done\n");
}

TEST(ExecRun, gives_only_the_environment_and_descriptors_it_is_told) {
  // A descriptor of this process without close-on-exec does not reach the
  // program; neither does the environment of this process.
  int leak = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(leak, 3);
  ::setenv("CMDBUS_DSN", "host=db password=secret", 1);
  auto r = run_program({"/bin/sh", "-c",
                        "ls /proc/$$/fd; env | sort; test -e /proc/$$/fd/"
                          + std::to_string(leak) + " && echo LEAKED"},
                       {"PATH=/usr/bin:/bin", "ONLY=this"}, {}, {});
  ::unsetenv("CMDBUS_DSN");
  ::close(leak);
  EXPECT_EQ(r.exit_status, 1) << r.out << r.err; // the test failed
  EXPECT_EQ(r.out.find("LEAKED"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("secret"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ONLY=this"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.rfind("0\n1\n2\n", 0), 0u) << r.out;
}

TEST(ExecRun, reports_a_program_that_cannot_start) {
  auto missing = run_program({"/nonexistent/handler"}, {}, {}, {});
  EXPECT_EQ(missing.end, program_end::not_started);
  EXPECT_EQ(missing.spawn_error, ENOENT);
  auto unknown = run_program({"no-such-program-anywhere"}, {}, {}, {});
  EXPECT_EQ(unknown.spawn_error, ENOENT);
  // A file without execute permission (for anyone: also when root).
  auto plain = std::filesystem::temp_directory_path()
               / ("cmdbus-exec-" + std::to_string(::getpid()));
  std::ofstream{plain} << "#!/bin/sh\n";
  std::filesystem::permissions(plain, std::filesystem::perms::owner_read
                                        | std::filesystem::perms::owner_write);
  auto not_executable = run_program({plain.string()}, {}, {}, {});
  std::filesystem::remove(plain);
  EXPECT_EQ(not_executable.spawn_error, EACCES);
  auto e = thrown_by<permanent_command_error>(missing);
  EXPECT_EQ(e.code(), "EXEC_NOT_STARTED");
  EXPECT_NE(e.error_message().find("No such file or directory (ENOENT)"),
            std::string::npos)
    << e.error_message();
}

// -- what a run means
// ----------------------------------------------------------

TEST(ExecOutcome, maps_exit_statuses_and_error_documents) {
  EXPECT_EQ(to_result(exited(0, " {\"ok\": true}\n"), {}).text(),
            "{\"ok\":true}");
  EXPECT_TRUE(to_result(exited(0, "\n"), {}).is_null());
  EXPECT_EQ(to_result(exited(0, "[1,2]"), {}).text(), "[1,2]");

  auto tempfail = thrown_by<transient_command_error>(
    exited(exit_transient, "", "connecting...\nupstream is down\n"));
  EXPECT_EQ(tempfail.code(), "EXEC_TEMPFAIL");
  EXPECT_NE(tempfail.error_message().find("upstream is down"),
            std::string::npos);

  // The error document on standard output, or as the last line of
  // standard error.
  auto rule = thrown_by<business_rule_error>(exited(
    exit_business_rule,
    R"({"code": "INSUFFICIENT_FUNDS", "message": "balance 3 < 5", "details": {"balance": 3}})"));
  EXPECT_EQ(rule.code(), "INSUFFICIENT_FUNDS");
  EXPECT_EQ(rule.error_message(), "balance 3 < 5");
  EXPECT_EQ(rule.details().text(), "{\"balance\":3}");
  auto rule2 = thrown_by<business_rule_error>(
    exited(exit_business_rule, "", "log line\n{\"code\": \"LIMIT\"}\n"));
  EXPECT_EQ(rule2.code(), "LIMIT");
  auto plain_rule = thrown_by<business_rule_error>(exited(exit_business_rule));
  EXPECT_EQ(plain_rule.code(), "EXEC_BUSINESS_RULE");

  auto failed = thrown_by<permanent_command_error>(
    exited(1, "", "Traceback...\nKeyError: 'amount'\n"));
  EXPECT_EQ(failed.code(), "EXEC_FAILED");
  EXPECT_NE(failed.error_message().find("exited with status 1"),
            std::string::npos);
  EXPECT_NE(failed.error_message().find("KeyError: 'amount'"),
            std::string::npos);
  EXPECT_EQ(failed.details().text(), "{\"exit_status\":1}");

  auto bad = thrown_by<permanent_command_error>(exited(0, "not json"));
  EXPECT_EQ(bad.code(), "EXEC_BAD_OUTPUT");
  auto cut = exited(0, "{\"a\": \"xxxx");
  cut.out_cut = true;
  auto too_large = thrown_by<permanent_command_error>(cut);
  EXPECT_EQ(too_large.code(), "EXEC_OUTPUT_TOO_LARGE");
  EXPECT_NE(too_large.error_message().find("was cut"), std::string::npos);

  program_result timed;
  timed.end = program_end::timed_out;
  timed.signal = SIGKILL;
  auto timeout = thrown_by<transient_command_error>(timed,
                                                    {1500ms, 200ms, 1024});
  EXPECT_EQ(timeout.code(), "EXEC_TIMEOUT");
  EXPECT_NE(timeout.error_message().find("timeout of 1500 ms"),
            std::string::npos);
  EXPECT_NE(timeout.error_message().find("SIGKILL after 200 ms"),
            std::string::npos)
    << timeout.error_message();
  program_result killed;
  killed.end = program_end::signaled;
  killed.signal = SIGSEGV;
  auto crash = thrown_by<transient_command_error>(killed);
  EXPECT_EQ(crash.code(), "EXEC_KILLED");
  EXPECT_NE(crash.error_message().find("SIGSEGV"), std::string::npos);
}

TEST(ExecOutcome, hands_the_command_and_its_context_to_the_program) {
  command cmd;
  cmd.domain = "billing";
  cmd.command_type = "Charge";
  cmd.command_id = uuid::random();
  cmd.data = json::parse(R"({"amount": 5, "note": "caf\u00e9"})");
  cmd.correlation_id = uuid::random();
  auto doc = json::parse(input_document(cmd, 2, 5, 77));
  auto expected = "{\"domain\":\"billing\",\"command_type\":\"Charge\","
                  "\"command_id\":\""
                  + cmd.command_id.to_string()
                  + "\",\"data\":{\"amount\":5,\"note\":\"caf\\u00e9\"},"
                    "\"attempt\":2,\"max_attempts\":5,\"msg_id\":77,"
                    "\"correlation_id\":\""
                  + cmd.correlation_id->to_string() + "\",\"reply_to\":null}";
  EXPECT_EQ(doc.text(), json::parse(expected).text());
  auto env = pass_environment(
    {"PATH", "UNSET_HERE", "REGION"},
    [](const char* name) -> std::optional<std::string> {
      if (std::string{name} == "PATH")
        return "/bin";
      if (std::string{name} == "REGION")
        return "eu";
      return std::nullopt;
    });
  EXPECT_EQ(env, (words{"PATH=/bin", "REGION=eu"}));
}

// -- thousands of runs
// ---------------------------------------------------------

TEST(ExecRun, thousands_of_commands_leave_no_descriptor_and_no_zombie) {
  // 2,000 commands through exec handlers on 4 threads (as 4 handler
  // slots): trivial programs, some failing, some not started, some timed
  // out. Afterwards this process has as many descriptors as before and no
  // unreaped child.
  handler_registry registry;
  config::exec_config cfg;
  cfg.domain_programs["d"] = {{"Ok", "/bin/true"},
                              {"Fail", "/bin/sh -c 'exit 75'"},
                              {"Missing", "/nonexistent/program"},
                              {"Slow", "/bin/sleep 5"}};
  cfg.domain_type_timeouts["d"]["Slow"] = 20ms;
  cfg.kill_grace = 20ms;
  add_exec_handlers(registry, cfg, "d");
  auto fds_before = open_fds();
  std::atomic<int> ok{0}, transient{0}, permanent{0};
  auto slot = [&](int index) {
    for (int i = 0; i < 500; ++i) {
      auto rc = std::make_shared<received_command>();
      rc->cmd.domain = "d";
      rc->cmd.command_id = uuid::random();
      rc->cmd.command_type = i % 100 == 1   ? "Fail"
                             : i % 100 == 2 ? "Missing"
                             : i % 250 == 3 ? "Slow"
                                            : "Ok";
      rc->attempt = 1;
      rc->max_attempts = 3;
      rc->msg_id = index * 1000 + i;
      auto cancelled = std::make_shared<std::atomic<bool>>(false);
      handler_context ctx{rc, [](std::chrono::seconds) {}, cancelled};
      auto out = registry.run(*rc, ctx);
      switch (out.kind) {
        case outcome_kind::success: ++ok; break;
        case outcome_kind::transient: ++transient; break;
        case outcome_kind::permanent: ++permanent; break;
        default: break;
      }
    }
  };
  std::vector<std::thread> slots;
  for (int i = 0; i < 4; ++i)
    slots.emplace_back(slot, i);
  for (auto& t : slots)
    t.join();
  EXPECT_EQ(ok + transient + permanent, 2000);
  EXPECT_EQ(transient, 4 * (5 + 2));
  EXPECT_EQ(permanent, 4 * 5);
  EXPECT_EQ(open_fds(), fds_before);
  EXPECT_EQ(zombie_children(), 0u);
}
