// The settings of external programs (docs/exec.md): --exec TYPE=COMMAND,
// [domains.NAME.exec], the [exec] section and per-type timeouts, their
// rules, --dump-config's rendering, and the splitting of command lines.

#include <gtest/gtest.h>

#include <stdexcept>

#include "cmdbus/config/worker_config.hpp"
#include "tests/support/config_fakes.hpp"

using namespace cmdbus::config;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

using words = std::vector<std::string>;

bool has_problem(const std::vector<std::string>& problems,
                 const std::string& part) {
  for (const auto& p : problems)
    if (contains(p, part))
      return true;
  return false;
}

} // namespace

TEST(ExecConfig, splits_command_lines_like_a_shell_without_expansions) {
  EXPECT_EQ(split_command("python3 handler.py"),
            (words{"python3", "handler.py"}));
  EXPECT_EQ(split_command("  sh  -c 'echo $HOME; exit 3'  "),
            (words{"sh", "-c", "echo $HOME; exit 3"}));
  EXPECT_EQ(split_command(R"(prog "a \"b\" \$x \n" c\ d)"),
            (words{"prog", "a \"b\" $x \\n", "c d"}));
  EXPECT_EQ(split_command("a''b \"\""), (words{"ab", ""}));
  EXPECT_THROW(split_command("   "), std::invalid_argument);
  EXPECT_THROW(split_command("sh -c 'echo"), std::invalid_argument);
  EXPECT_THROW(split_command("sh -c \"echo"), std::invalid_argument);
}

TEST(ExecConfig, reads_programs_and_bounds_from_each_place) {
  // The file gives per-domain programs and timeouts; the command line adds
  // programs and timeouts for every domain; the domain's own win.
  temp_file file{R"([worker]
domains = ["billing", "mail"]
[exec]
timeout = 2min
kill-grace = 1s
max-output = 4096
env = ["PATH", "REGION"]
[domains.billing.exec]
Charge = "python3 /srv/charge.py --live"
Notify = "/bin/notify billing"
[domains.billing.types.Charge]
concurrency = 2
exec-timeout = 5min
)"};
  auto cfg = load({"--config", file.path(), "--exec", "Notify=/bin/notify all",
                   "--exec", "Ping=/bin/true", "--exec-timeout", "Ping=250ms",
                   "--exec-max-output", "2048"},
                  fake_env{{{"CMDBUS_EXEC_KILL_GRACE", "3s"}}}.lookup());
  EXPECT_EQ(cfg.exec.timeout, 2min);
  EXPECT_EQ(cfg.exec.kill_grace, 3s);
  EXPECT_EQ(cfg.exec.max_output, 2048);
  EXPECT_EQ(cfg.exec.env, (words{"PATH", "REGION"}));
  auto billing = exec_programs_of(cfg.exec, "billing");
  EXPECT_EQ(billing.size(), 3u);
  EXPECT_EQ(billing["Charge"], "python3 /srv/charge.py --live");
  EXPECT_EQ(billing["Notify"], "/bin/notify billing");
  EXPECT_EQ(billing["Ping"], "/bin/true");
  auto mail = exec_programs_of(cfg.exec, "mail");
  EXPECT_EQ(mail.size(), 2u);
  EXPECT_EQ(mail["Notify"], "/bin/notify all");
  EXPECT_EQ(exec_timeout_of(cfg.exec, "billing", "Charge"), 5min);
  EXPECT_EQ(exec_timeout_of(cfg.exec, "mail", "Charge"), 2min);
  EXPECT_EQ(exec_timeout_of(cfg.exec, "mail", "Ping"), 250ms);
  EXPECT_EQ(scheduling_of(cfg, "billing").type_concurrency.at("Charge"), 2);

  // --dump-config writes it all as a file that reads back the same.
  auto text = describe(cfg);
  EXPECT_TRUE(contains(text,
                       "[domains.mail.exec]\nNotify = \"/bin/notify all\"\n"
                       "Ping = \"/bin/true\"\n"))
    << text;
  worker_config again;
  apply_ini(again, text, "dump.ini");
  EXPECT_EQ(exec_programs_of(again.exec, "billing"), billing);
  EXPECT_EQ(exec_programs_of(again.exec, "mail"), mail);
  EXPECT_EQ(exec_timeout_of(again.exec, "billing", "Charge"), 5min);
  EXPECT_EQ(exec_timeout_of(again.exec, "mail", "Ping"), 250ms);
  EXPECT_EQ(again.exec.kill_grace, 3s);
  EXPECT_EQ(again.exec.max_output, 2048);
  EXPECT_EQ(again.exec.env, cfg.exec.env);
}

TEST(ExecConfig, refuses_bad_values_with_clear_messages) {
  auto args_error = [](const words& args) {
    return error_of([&] { load(args, fake_env{}.lookup()); });
  };
  EXPECT_TRUE(contains(args_error({"--domain", "d", "--exec", "Greet"}),
                       "option --exec expects TYPE=COMMAND"));
  EXPECT_TRUE(contains(args_error({"--domain", "d", "--exec", "=/bin/true"}),
                       "option --exec expects TYPE=COMMAND"));
  EXPECT_TRUE(contains(args_error({"--domain", "d", "--exec", "Greet=  "}),
                       "the command is empty"));
  EXPECT_TRUE(contains(args_error({"--domain", "d", "--exec", "G=sh -c 'x"}),
                       "quote is not closed"));
  EXPECT_TRUE(
    contains(args_error({"--domain", "d", "--exec-timeout", "Greet=soon"}),
             "--exec-timeout"));
  // A per-type timeout is the command line's (the file has its own place).
  EXPECT_TRUE(contains(error_of([] {
                         worker_config cfg;
                         apply_ini(cfg, "[exec]\ntimeout = Greet=1s\n",
                                   "w.ini");
                       }),
                       "w.ini:2"));
  EXPECT_TRUE(contains(error_of([] {
                         worker_config cfg;
                         apply_ini(cfg, "[domains.d.exec]\nGreet = 3\n",
                                   "w.ini");
                       }),
                       "w.ini:2"));
  EXPECT_TRUE(contains(error_of([] {
                         worker_config cfg;
                         apply_ini(cfg,
                                   "[domains.d.exec]\nA = \"/bin/true\"\n"
                                   "A = \"/bin/false\"\n",
                                   "w.ini");
                       }),
                       "duplicate key 'A'"));

  worker_config cfg;
  cfg.domains = {"d"};
  cfg.exec.domain_programs["other"]["A"] = "/bin/true";
  cfg.exec.domain_programs["d"]["B"] = "sh -c 'oops";
  cfg.exec.timeout = 5ms;
  cfg.exec.type_timeouts["A"] = 25h;
  cfg.exec.kill_grace = 11min;
  cfg.exec.max_output = 10;
  cfg.exec.env = {"PATH", "BAD-NAME", "1X"};
  auto problems = validate(cfg);
  EXPECT_TRUE(has_problem(problems, "exec: \"other\" is not a served domain"));
  EXPECT_TRUE(has_problem(problems, "the command of type \"B\""));
  EXPECT_TRUE(has_problem(problems, "exec-timeout (5ms)"));
  EXPECT_TRUE(has_problem(problems, "exec-timeout of type \"A\""));
  EXPECT_TRUE(has_problem(problems, "exec-kill-grace"));
  EXPECT_TRUE(has_problem(problems, "exec-max-output (10)"));
  EXPECT_TRUE(has_problem(problems, "exec-env: \"BAD-NAME\""));
  EXPECT_TRUE(has_problem(problems, "exec-env: \"1X\""));
  EXPECT_FALSE(has_problem(problems, "exec-env: \"PATH\""));
}
