#include "cmdbus/config/worker_config.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/config_fakes.hpp"

using namespace cmdbus::config;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {


/// A valid configuration: the defaults plus one domain.
worker_config valid() {
  worker_config cfg;
  cfg.domains = {"payments"};
  return cfg;
}

std::string ini_error(std::string_view text) {
  return error_of([&] {
    worker_config cfg;
    apply_ini(cfg, text, "worker.ini");
  });
}

bool has_problem(const std::vector<std::string>& problems,
                 const std::string& part) {
  for (const auto& p : problems)
    if (contains(p, part))
      return true;
  return false;
}

constexpr const char* full_ini = R"(; cmdbus worker configuration
dsn = "host=db dbname=app"   ; the database

[worker]
domains = ["payments", "reports"]
concurrency = 8
prefetch = 12
visibility-timeout = 2min
poll-interval = 250ms
use-notify = false
statement-timeout = 10s
shutdown-timeout = 1min
flush-interval = 5ms
tick = true

[retry]
max-attempts = 5
backoff = [1, 2,
           5]   ; spans lines
jitter = 0.25
)";

} // namespace

// -- defaults and validation -------------------------------------------------

TEST(ConfigDefaults, are_valid_except_missing_domains) {
  worker_config cfg;
  auto problems = validate(cfg);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(contains(problems[0], "no domains configured"));
  EXPECT_TRUE(validate(valid()).empty());
  EXPECT_EQ(cfg.concurrency, 16);
  EXPECT_EQ(cfg.prefetch, prefetch_auto);
  EXPECT_EQ(starting_prefetch(cfg), 0);
  EXPECT_EQ(max_prefetch(cfg), 256);
  EXPECT_EQ(cfg.visibility_timeout, 30s);
  EXPECT_EQ(cfg.poll_interval, 1000ms);
  EXPECT_TRUE(cfg.use_notify);
  EXPECT_EQ(cfg.retry.max_attempts, 3);
  EXPECT_EQ(cfg.retry.backoff_seconds, (std::vector<int>{10, 60, 300}));
  EXPECT_EQ(cfg.retry.jitter, 0.0);
  EXPECT_EQ(cfg.statement_timeout, 25000ms);
  EXPECT_EQ(cfg.shutdown_timeout, 30000ms);
  EXPECT_EQ(cfg.flush_interval, 2ms);
  EXPECT_FALSE(cfg.tick);
  EXPECT_FALSE(cfg.dump_config);
}

TEST(ConfigValidate, rejects_statement_timeout_not_below_vt) {
  auto cfg = valid();
  cfg.statement_timeout = 30000ms;
  auto problems = validate(cfg);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "statement-timeout (30000ms) must be below visibility-timeout "
            "(30s)");
  cfg.statement_timeout = 29999ms;
  EXPECT_TRUE(validate(cfg).empty());
  cfg.statement_timeout = 0ms;
  EXPECT_TRUE(has_problem(validate(cfg), "statement-timeout (0ms) must be"));
}

TEST(ConfigValidate, rejects_bad_concurrency) {
  auto cfg = valid();
  cfg.concurrency = 0;
  EXPECT_TRUE(has_problem(validate(cfg),
                          "concurrency (0) must be between 1 and 4096"));
  cfg.concurrency = 4097;
  EXPECT_TRUE(has_problem(validate(cfg), "concurrency (4097)"));
  cfg.concurrency = 4096;
  EXPECT_TRUE(validate(cfg).empty());
}

TEST(ConfigValidate, rejects_bad_prefetch) {
  auto cfg = valid();
  cfg.prefetch = -2;
  EXPECT_TRUE(has_problem(validate(cfg),
                          "prefetch (-2) must be auto or between 0 and 4096"));
  cfg.prefetch = 4097;
  EXPECT_TRUE(has_problem(validate(cfg), "prefetch (4097)"));
  cfg.prefetch = 4096;
  EXPECT_TRUE(validate(cfg).empty());
  EXPECT_EQ(starting_prefetch(cfg), 4096);
  EXPECT_EQ(max_prefetch(cfg), 4096);
  cfg.prefetch = prefetch_auto;
  EXPECT_TRUE(validate(cfg).empty());
}

TEST(ConfigPrefetch, auto_in_the_file_the_environment_and_the_options) {
  worker_config cfg;
  cfg.prefetch = 8;
  apply_ini(cfg, "[worker]\nprefetch = auto\n", "worker.ini");
  EXPECT_EQ(cfg.prefetch, prefetch_auto);
  cfg.prefetch = 8;
  apply_env(cfg, fake_env{{{"CMDBUS_PREFETCH", "auto"}}}.lookup());
  EXPECT_EQ(cfg.prefetch, prefetch_auto);
  cfg.prefetch = 8;
  EXPECT_FALSE(apply_args(cfg, {"--prefetch", "auto"}));
  EXPECT_EQ(cfg.prefetch, prefetch_auto);
  EXPECT_TRUE(contains(describe(cfg), "prefetch = auto"));
  // Anything else that is not a number is refused with the setting's name.
  EXPECT_THROW(apply_ini(cfg, "[worker]\nprefetch = lots\n", "worker.ini"),
               config_error);
}

TEST(ConfigValidate, rejects_bad_domain_names) {
  auto cfg = valid();
  cfg.domains = {"pay-ments"};
  auto problems = validate(cfg);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(contains(problems[0], "\"pay-ments\"")) << problems[0];
  EXPECT_TRUE(contains(problems[0], "letters, digits and underscores"));
  cfg.domains = {std::string(38, 'a')};
  EXPECT_TRUE(has_problem(validate(cfg), "longer than 37"));
  cfg.domains = {std::string(37, 'a')};
  EXPECT_TRUE(validate(cfg).empty());
  cfg.domains = {""};
  EXPECT_TRUE(has_problem(validate(cfg), "is empty"));
  cfg.domains = {"payments", "payments"};
  EXPECT_TRUE(has_problem(validate(cfg), "listed twice"));
}

TEST(ConfigValidate, rejects_bad_durations) {
  auto cfg = valid();
  cfg.visibility_timeout = 0s;
  EXPECT_TRUE(has_problem(validate(cfg), "visibility-timeout (0s)"));
  cfg = valid();
  cfg.poll_interval = 9ms;
  EXPECT_TRUE(has_problem(validate(cfg), "poll-interval (9ms)"));
  cfg.poll_interval = 3600001ms;
  EXPECT_TRUE(has_problem(validate(cfg), "poll-interval (3600001ms)"));
  cfg = valid();
  cfg.shutdown_timeout = -1ms;
  EXPECT_TRUE(has_problem(validate(cfg), "shutdown-timeout (-1ms)"));
  cfg.shutdown_timeout = 0ms;
  cfg.flush_interval = 1001ms;
  EXPECT_TRUE(has_problem(validate(cfg), "flush-interval (1001ms)"));
  cfg.flush_interval = 0ms;
  EXPECT_TRUE(validate(cfg).empty());
}

TEST(ConfigValidate, rejects_bad_retry_settings) {
  auto cfg = valid();
  cfg.retry.max_attempts = 0;
  EXPECT_TRUE(has_problem(validate(cfg), "max-attempts (0)"));
  cfg = valid();
  cfg.retry.backoff_seconds = {10, -5};
  EXPECT_TRUE(has_problem(validate(cfg), "backoff entry 2 (-5s)"));
  cfg = valid();
  cfg.retry.backoff_seconds = {};
  EXPECT_TRUE(validate(cfg).empty());
  cfg.retry.jitter = 1.5;
  EXPECT_TRUE(has_problem(validate(cfg),
                          "jitter (1.5) must be between 0 and 1"));
  cfg.retry.jitter = -0.1;
  EXPECT_TRUE(has_problem(validate(cfg), "jitter (-0.1)"));
  cfg.retry.jitter = 1.0;
  EXPECT_TRUE(validate(cfg).empty());
}

TEST(ConfigValidate, reports_all_problems_together) {
  worker_config cfg;
  cfg.concurrency = 0;
  cfg.retry.jitter = 2;
  cfg.statement_timeout = 60s;
  auto problems = validate(cfg);
  EXPECT_EQ(problems.size(), 4u);
  auto err = error_of([] {
    load({"--concurrency", "0", "--jitter", "2"}, fake_env{}.lookup());
  });
  EXPECT_TRUE(contains(err, "no domains configured")) << err;
  EXPECT_TRUE(contains(err, "\nconcurrency (0)")) << err;
  EXPECT_TRUE(contains(err, "\njitter (2)")) << err;
}

// -- INI files ---------------------------------------------------------------

TEST(ConfigIni, applies_a_full_file) {
  worker_config cfg;
  apply_ini(cfg, full_ini, "worker.ini");
  EXPECT_EQ(cfg.dsn, "host=db dbname=app");
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"payments", "reports"}));
  EXPECT_EQ(cfg.concurrency, 8);
  EXPECT_EQ(cfg.prefetch, 12);
  EXPECT_EQ(cfg.visibility_timeout, 120s);
  EXPECT_EQ(cfg.poll_interval, 250ms);
  EXPECT_FALSE(cfg.use_notify);
  EXPECT_EQ(cfg.statement_timeout, 10s);
  EXPECT_EQ(cfg.shutdown_timeout, 60s);
  EXPECT_EQ(cfg.flush_interval, 5ms);
  EXPECT_TRUE(cfg.tick);
  EXPECT_EQ(cfg.retry.max_attempts, 5);
  EXPECT_EQ(cfg.retry.backoff_seconds, (std::vector<int>{1, 2, 5}));
  EXPECT_EQ(cfg.retry.jitter, 0.25);
  EXPECT_TRUE(validate(cfg).empty());
}

TEST(ConfigIni, accepts_comments_blank_lines_and_crlf) {
  worker_config cfg;
  apply_ini(cfg,
            "; only a comment\r\n\r\n  ;indented comment\r\n[worker] ; c\r\n"
            "concurrency=4;trailing\r\ndomains = [ ; open\r\n \"a\", ; one\r\n"
            " \"b\", ; trailing comma\r\n]\r\n",
            "w.ini");
  EXPECT_EQ(cfg.concurrency, 4);
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"a", "b"}));
}

TEST(ConfigIni, accepts_strings_lists_and_global_section) {
  worker_config cfg;
  apply_ini(cfg,
            "[global]\ndsn='host=x \\'q\\''\n[retry]\nbackoff = []\n"
            "[worker]\ndomains = \"solo\"\nvisibility-timeout = 45\n",
            "w.ini");
  EXPECT_EQ(cfg.dsn, "host=x 'q'");
  EXPECT_TRUE(cfg.retry.backoff_seconds.empty());
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"solo"}));
  EXPECT_EQ(cfg.visibility_timeout, 45s);
}

TEST(ConfigIni, accepts_all_duration_units) {
  worker_config cfg;
  apply_ini(cfg,
            "[worker]\npoll-interval=1h\nstatement-timeout=2min\n"
            "shutdown-timeout=3s\nflush-interval=0ms\n"
            "visibility-timeout=3600000ms\n",
            "w.ini");
  EXPECT_EQ(cfg.poll_interval, 1h);
  EXPECT_EQ(cfg.statement_timeout, 2min);
  EXPECT_EQ(cfg.shutdown_timeout, 3s);
  EXPECT_EQ(cfg.flush_interval, 0ms);
  EXPECT_EQ(cfg.visibility_timeout, 1h);
}

TEST(ConfigIni, reports_unknown_keys_and_sections) {
  EXPECT_EQ(ini_error("[worker]\n\n; x\n\n\n\nconcurency = 4\n"),
            "worker.ini:7: unknown key 'concurency' in section [worker] "
            "(did you mean 'concurrency'?)");
  EXPECT_EQ(ini_error("[worker]\nmax-attempts = 4\n"),
            "worker.ini:2: unknown key 'max-attempts' in section [worker] "
            "('max-attempts' belongs in section [retry])");
  EXPECT_EQ(ini_error("frobnicate = 1\n"),
            "worker.ini:1: unknown key 'frobnicate' at the top level");
  EXPECT_EQ(ini_error("\n[workers]\n"),
            "worker.ini:2: unknown section [workers] (expected [worker], "
            "[tick], [retry], [remote], [tls], [exec], [admin], [api], "
            "[retention], [domains.NAME], [domains.NAME.types.TYPE] or "
            "[domains.NAME.exec])");
  EXPECT_EQ(ini_error("[worker]\nvisibility_timeout = 3s\n"),
            "worker.ini:2: unknown key 'visibility_timeout' in section "
            "[worker] (did you mean 'visibility-timeout'?)");
}

TEST(ConfigIni, reports_duplicate_keys) {
  EXPECT_EQ(ini_error("[worker]\nconcurrency = 4\n[retry]\n[worker]\n"
                      "concurrency = 5\n"),
            "worker.ini:5: duplicate key 'concurrency' in section [worker] "
            "(first set on line 2)");
}

TEST(ConfigIni, reports_bad_syntax) {
  EXPECT_EQ(ini_error("[worker]\nworker.concurrency = 4\n"),
            "worker.ini:2: dotted key 'worker.concurrency' is not allowed in "
            "a config file; write 'concurrency' in a [worker] section");
  EXPECT_EQ(ini_error("[worker\n"),
            "worker.ini:1: missing ']' in section header");
  EXPECT_EQ(ini_error("[worker]\nconcurrency 4\n"),
            "worker.ini:2: expected '=' after key 'concurrency'");
  EXPECT_EQ(ini_error("[worker]\nconcurrency =\n"),
            "worker.ini:2: missing value for key 'concurrency'");
  EXPECT_EQ(ini_error("[worker]\nconcurrency = 4 5\n"),
            "worker.ini:2: unexpected text after the value of 'concurrency'");
  EXPECT_EQ(ini_error("dsn = \"host=x password=secret\n"),
            "worker.ini:1: unterminated string (missing closing quote)");
  EXPECT_EQ(ini_error("[worker]\ndomains = [\"a\",\n\"b\"\n"),
            "worker.ini:2: unterminated list of key 'domains' (missing ']')");
  EXPECT_EQ(ini_error("[worker]\ndomains = [\"a\" \"b\"]\n"),
            "worker.ini:2: expected ',' or ']' in the list of key 'domains'");
  EXPECT_EQ(ini_error("[retry]\nbackoff = [[1]]\n"),
            "worker.ini:2: nested lists are not supported (key 'backoff')");
  EXPECT_EQ(ini_error("worker { concurrency = 4 }\n"),
            "worker.ini:1: 'worker { ... }' blocks are not supported; use a "
            "[worker] section");
  EXPECT_EQ(ini_error("# hash comment\n"),
            "worker.ini:1: expected a key, a [section] header or a ';' "
            "comment");
  EXPECT_EQ(ini_error("[worker] x\n"),
            "worker.ini:1: unexpected text after the section header "
            "[worker]");
}

TEST(ConfigIni, reports_wrong_types) {
  EXPECT_EQ(ini_error("[worker]\nconcurrency = abc\n"),
            "worker.ini:2: key 'concurrency' in section [worker] expects an "
            "integer, got \"abc\"");
  EXPECT_EQ(ini_error("[worker]\nconcurrency = \"16\"\n"),
            "worker.ini:2: key 'concurrency' in section [worker] expects an "
            "integer, got the string \"16\"");
  EXPECT_EQ(ini_error("[worker]\nconcurrency = 99999999999\n"),
            "worker.ini:2: key 'concurrency' in section [worker] is out of "
            "range: \"99999999999\"");
  EXPECT_EQ(ini_error("[worker]\npoll-interval = 100\n"),
            "worker.ini:2: key 'poll-interval' in section [worker] expects a "
            "duration with a unit (ms, s, min, h or d) such as 250ms or "
            "30s, got \"100\"");
  EXPECT_TRUE(contains(ini_error("[worker]\npoll-interval = 1.5s\n"),
                       "expects a duration"));
  EXPECT_TRUE(contains(ini_error("[worker]\nvisibility-timeout = 1500ms\n"),
                       "must be a whole number of seconds"));
  EXPECT_EQ(ini_error("[worker]\nuse-notify = yes\n"),
            "worker.ini:2: key 'use-notify' in section [worker] expects true "
            "or false, got \"yes\"");
  EXPECT_TRUE(contains(ini_error("[worker]\ndomains = [payments]\n"),
                       "expects quoted strings"));
  EXPECT_TRUE(contains(ini_error("[retry]\nbackoff = 10\n"),
                       "expects a list of integers"));
  EXPECT_EQ(ini_error("[retry]\nbackoff = [10, x]\n"),
            "worker.ini:2: key 'backoff' in section [retry] entry 2 expects "
            "an integer, got \"x\"");
  EXPECT_TRUE(contains(ini_error("[retry]\njitter = lots\n"),
                       "expects a number"));
}

TEST(ConfigIni, never_echoes_the_dsn) {
  auto err = ini_error("dsn = host=x password=secret\n");
  EXPECT_EQ(err, "worker.ini:1: key 'dsn' at the top level expects a quoted "
                 "string");
  EXPECT_FALSE(contains(ini_error("dsn = \"password=secret\" x\n"),
                        "secret"));
}

// -- environment -------------------------------------------------------------

TEST(ConfigEnv, applies_every_variable) {
  worker_config cfg;
  fake_env env{{{"CMDBUS_DSN", "host=e"},
                {"CMDBUS_DOMAINS", " a , b "},
                {"CMDBUS_CONCURRENCY", "7"},
                {"CMDBUS_PREFETCH", "6"},
                {"CMDBUS_VISIBILITY_TIMEOUT", "40"},
                {"CMDBUS_POLL_INTERVAL", "50ms"},
                {"CMDBUS_USE_NOTIFY", "0"},
                {"CMDBUS_MAX_ATTEMPTS", "9"},
                {"CMDBUS_BACKOFF", "1,2,3"},
                {"CMDBUS_BACKOFF_JITTER", "0.5"},
                {"CMDBUS_STATEMENT_TIMEOUT", "5s"},
                {"CMDBUS_SHUTDOWN_TIMEOUT", "0ms"},
                {"CMDBUS_FLUSH_INTERVAL", "10ms"}}};
  apply_env(cfg, env.lookup());
  EXPECT_EQ(cfg.dsn, "host=e");
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cfg.concurrency, 7);
  EXPECT_EQ(cfg.prefetch, 6);
  EXPECT_EQ(cfg.visibility_timeout, 40s);
  EXPECT_EQ(cfg.poll_interval, 50ms);
  EXPECT_FALSE(cfg.use_notify);
  EXPECT_EQ(cfg.retry.max_attempts, 9);
  EXPECT_EQ(cfg.retry.backoff_seconds, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(cfg.retry.jitter, 0.5);
  EXPECT_EQ(cfg.statement_timeout, 5s);
  EXPECT_EQ(cfg.shutdown_timeout, 0ms);
  EXPECT_EQ(cfg.flush_interval, 10ms);
}

TEST(ConfigEnv, treats_empty_variables_as_unset) {
  worker_config cfg;
  apply_env(cfg, fake_env{{{"CMDBUS_CONCURRENCY", ""}}}.lookup());
  EXPECT_EQ(cfg.concurrency, 16);
}

TEST(ConfigEnv, reports_bad_values_with_the_variable) {
  auto env_error = [](std::string name, std::string value) {
    return error_of([&] {
      worker_config cfg;
      apply_env(cfg, fake_env{{{name, value}}}.lookup());
    });
  };
  EXPECT_EQ(env_error("CMDBUS_CONCURRENCY", "x"),
            "environment variable CMDBUS_CONCURRENCY expects an integer, got "
            "\"x\"");
  EXPECT_EQ(env_error("CMDBUS_USE_NOTIFY", "maybe"),
            "environment variable CMDBUS_USE_NOTIFY expects true, false, 1 "
            "or 0, got \"maybe\"");
  EXPECT_EQ(env_error("CMDBUS_DOMAINS", "a,,b"),
            "environment variable CMDBUS_DOMAINS has an empty entry in its "
            "comma-separated list");
  EXPECT_TRUE(contains(env_error("CMDBUS_BACKOFF", "10,x"), "entry 2"));
  EXPECT_TRUE(contains(env_error("CMDBUS_POLL_INTERVAL", "5"),
                       "CMDBUS_POLL_INTERVAL expects a duration"));
}

TEST(ConfigPooler, reads_the_mode_and_polls_behind_a_transaction_pooler) {
  worker_config cfg;
  EXPECT_EQ(cfg.pooler, cmdbus::db::pooler_mode::none);
  EXPECT_TRUE(listens(cfg));
  apply_ini(cfg, "pooler = \"session\"\n", "worker.ini");
  EXPECT_EQ(cfg.pooler, cmdbus::db::pooler_mode::session);
  EXPECT_TRUE(listens(cfg));
  apply_env(cfg, fake_env{{{"CMDBUS_POOLER", "transaction"}}}.lookup());
  EXPECT_EQ(cfg.pooler, cmdbus::db::pooler_mode::transaction);
  EXPECT_TRUE(cfg.use_notify) << "the setting stays; the worker polls";
  EXPECT_FALSE(listens(cfg));
  apply_args(cfg, {"--pooler", "none"});
  EXPECT_EQ(cfg.pooler, cmdbus::db::pooler_mode::none);
  EXPECT_TRUE(contains(describe(cfg), "\npooler = \"none\"\n"));
  EXPECT_TRUE(contains(ini_error("pooler = \"transactions\"\n"),
                       "expects none, session or transaction"));
}

// -- command line ------------------------------------------------------------

TEST(ConfigArgs, applies_every_option) {
  worker_config cfg;
  auto file = apply_args(cfg, {"--config",
                               "w.ini",
                               "--dsn=host=c",
                               "--domain",
                               "a",
                               "--domain=b",
                               "--concurrency",
                               "3",
                               "--prefetch=4",
                               "--backoff",
                               "5,6",
                               "--max-attempts=2",
                               "--visibility-timeout",
                               "90",
                               "--poll-interval",
                               "20ms",
                               "--no-notify",
                               "--statement-timeout=1min",
                               "--shutdown-timeout",
                               "5s",
                               "--flush-interval",
                               "0ms",
                               "--jitter",
                               "0.1",
                               "--tick",
                               "--dump-config"});
  ASSERT_TRUE(file);
  EXPECT_EQ(*file, "w.ini");
  EXPECT_EQ(cfg.dsn, "host=c");
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cfg.concurrency, 3);
  EXPECT_EQ(cfg.prefetch, 4);
  EXPECT_EQ(cfg.retry.backoff_seconds, (std::vector<int>{5, 6}));
  EXPECT_EQ(cfg.retry.max_attempts, 2);
  EXPECT_EQ(cfg.visibility_timeout, 90s);
  EXPECT_EQ(cfg.poll_interval, 20ms);
  EXPECT_FALSE(cfg.use_notify);
  EXPECT_EQ(cfg.statement_timeout, 60s);
  EXPECT_EQ(cfg.shutdown_timeout, 5s);
  EXPECT_EQ(cfg.flush_interval, 0ms);
  EXPECT_EQ(cfg.retry.jitter, 0.1);
  EXPECT_TRUE(cfg.tick);
  EXPECT_TRUE(cfg.dump_config);
}

TEST(ConfigArgs, empty_backoff_means_empty_schedule) {
  worker_config cfg;
  EXPECT_FALSE(apply_args(cfg, {"--backoff="}));
  EXPECT_TRUE(cfg.retry.backoff_seconds.empty());
}

TEST(ConfigArgs, domain_replaces_earlier_domains) {
  worker_config cfg;
  cfg.domains = {"from_file", "other"};
  apply_args(cfg, {"--domain", "x", "--concurrency", "2", "--domain", "y"});
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"x", "y"}));
  apply_args(cfg, {"--concurrency", "2"});
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"x", "y"}));
}

TEST(ConfigArgs, reports_bad_command_lines) {
  auto args_error = [](std::vector<std::string> args) {
    return error_of([&] {
      worker_config cfg;
      apply_args(cfg, args);
    });
  };
  EXPECT_EQ(args_error({"--concurency", "4"}),
            "unknown option '--concurency'; did you mean --concurrency?");
  EXPECT_EQ(args_error({"--concurrency"}),
            "option --concurrency needs a value");
  EXPECT_EQ(args_error({"--concurrency=x"}),
            "option --concurrency expects an integer, got \"x\"");
  EXPECT_EQ(args_error({"--tick=yes"}), "option --tick takes no value");
  EXPECT_EQ(args_error({"payments"}),
            "unexpected argument \"payments\"");
  EXPECT_EQ(args_error({"--config="}), "option --config needs a file name");
  EXPECT_TRUE(contains(args_error({"--poll-interval", "7"}),
                       "option --poll-interval expects a duration"));
}

TEST(ConfigArgs, help_is_a_distinct_exception) {
  worker_config cfg;
  EXPECT_THROW(apply_args(cfg, {"--help"}), help_requested);
  EXPECT_THROW(apply_args(cfg, {"--bogus", "-h"}), help_requested);
  EXPECT_THROW(load({"--help", "--config", "/nonexistent/x.ini"},
                    fake_env{}.lookup()),
               help_requested);
  std::string help = worker_help();
  EXPECT_EQ(std::string{help_requested{}.what()}, help);
  for (const char* part :
       {"usage: cmdbus worker", "--config", "--dsn", "--domain",
        "--concurrency", "--prefetch", "CMDBUS_PREFETCH", "--backoff", "--max-attempts", "--visibility-timeout",
        "--poll-interval", "--no-notify", "--statement-timeout",
        "--shutdown-timeout", "--flush-interval", "--jitter", "--tick",
        "--dump-config", "--help", "CMDBUS_BACKOFF_JITTER", "CMDBUS_CONFIG",
        "--remote-pool", "CMDBUS_REMOTE_POOLS", "--tls-certificate",
        "CMDBUS_TLS_PASSPHRASE", "--domain-dsn", "CMDBUS_DOMAIN_DSN_",
        "[domains.reports]"})
    EXPECT_TRUE(contains(help, part)) << part;
  size_t start = 0;
  while (start < help.size()) {
    auto end = help.find('\n', start);
    if (end == std::string::npos)
      end = help.size();
    EXPECT_LE(end - start, 80u) << help.substr(start, end - start);
    start = end + 1;
  }
}

// -- load: precedence --------------------------------------------------------

TEST(ConfigLoad, file_then_env_then_cli) {
  temp_file file{"dsn = \"host=file\"\n[worker]\ndomains = [\"f\"]\n"
                 "concurrency = 2\npoll-interval = 2s\n"
                 "shutdown-timeout = 2s\n[retry]\nmax-attempts = 2\n"};
  fake_env env{{{"CMDBUS_CONFIG", file.path()},
                {"CMDBUS_DOMAINS", "e"},
                {"CMDBUS_CONCURRENCY", "3"},
                {"CMDBUS_POLL_INTERVAL", "3s"}}};
  auto cfg = load({"--concurrency", "4"}, env.lookup());
  EXPECT_EQ(cfg.dsn, "host=file");                           // file
  EXPECT_EQ(cfg.retry.max_attempts, 2);                      // file
  EXPECT_EQ(cfg.shutdown_timeout, 2s);                       // file
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"e"}));   // env
  EXPECT_EQ(cfg.poll_interval, 3s);                          // env
  EXPECT_EQ(cfg.concurrency, 4);                             // cli
  EXPECT_EQ(cfg.visibility_timeout, 30s);                    // default
  cfg = load({"--domain", "c1", "--domain", "c2"}, env.lookup());
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"c1", "c2"}));
}

TEST(ConfigLoad, config_option_wins_over_env) {
  temp_file a{"[worker]\ndomains = [\"from_a\"]\n"};
  temp_file b{"[worker]\ndomains = [\"from_b\"]\n"};
  fake_env env{{{"CMDBUS_CONFIG", a.path()}}};
  EXPECT_EQ(load({}, env.lookup()).domains[0], "from_a");
  EXPECT_EQ(load({"--config", b.path()}, env.lookup()).domains[0], "from_b");
}

TEST(ConfigLoad, reports_file_errors_with_the_path) {
  temp_file file{"[worker]\nconcurency = 4\n"};
  auto err = error_of([&] {
    load({"--config=" + file.path()}, fake_env{}.lookup());
  });
  EXPECT_EQ(err.rfind(file.path() + ":2: unknown key 'concurency'", 0), 0u)
    << err;
  err = error_of([] {
    load({"--config", "/nonexistent/worker.ini"}, fake_env{}.lookup());
  });
  EXPECT_TRUE(contains(err, "cannot read config file "
                            "'/nonexistent/worker.ini'"))
    << err;
}

TEST(ConfigLoad, without_any_file_uses_env_and_cli) {
  auto cfg = load({"--domain", "p", "--dump-config"},
                  fake_env{{{"CMDBUS_MAX_ATTEMPTS", "4"}}}.lookup());
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"p"}));
  EXPECT_EQ(cfg.retry.max_attempts, 4);
  EXPECT_TRUE(cfg.dump_config);
}

// -- describe() and passwords ----------------------------------------------

TEST(ConfigDescribe, masks_the_password) {
  auto cfg = valid();
  cfg.dsn = "host=db password=secret";
  auto text = describe(cfg);
  EXPECT_FALSE(contains(text, "secret")) << text;
  EXPECT_TRUE(contains(text, "dsn = \"host=db password=***\"")) << text;
  cfg.dsn = "postgresql://u:secret@db/app";
  EXPECT_FALSE(contains(describe(cfg), "secret"));
}

TEST(ConfigDescribe, round_trips_through_apply_ini) {
  worker_config cfg;
  apply_ini(cfg, full_ini, "worker.ini");
  auto text = describe(cfg);
  EXPECT_TRUE(contains(text, "visibility-timeout = 2min")) << text;
  EXPECT_TRUE(contains(text, "poll-interval = 250ms")) << text;
  EXPECT_TRUE(contains(text, "backoff = [1, 2, 5]")) << text;
  EXPECT_TRUE(contains(text, "prefetch = 12")) << text;
  worker_config again;
  apply_ini(again, text, "dump.ini");
  EXPECT_EQ(describe(again), text);
  EXPECT_EQ(again.domains, cfg.domains);
  EXPECT_EQ(again.retry.jitter, cfg.retry.jitter);
}

TEST(ConfigErrors, never_contain_the_password) {
  auto err = error_of([] {
    worker_config cfg;
    apply_args(cfg, {"--tick", "postgresql://u:secret@db/app"});
  });
  EXPECT_FALSE(err.empty());
  EXPECT_FALSE(contains(err, "secret")) << err;
  err = error_of([] {
    worker_config cfg;
    apply_args(cfg, {"--dns=host=db password=secret"});
  });
  EXPECT_FALSE(err.empty());
  EXPECT_FALSE(contains(err, "secret")) << err;
  err = error_of([] {
    load({"--dsn", "host=db password=secret", "--concurrency", "0"},
         fake_env{}.lookup());
  });
  EXPECT_FALSE(err.empty());
  EXPECT_FALSE(contains(err, "secret")) << err;
}

// -- the DSN from a file
// -------------------------------------------------------

TEST(ConfigDsnFile, is_read_from_every_source_the_later_winning) {
  // temp_file makes files of mode 0600.
  temp_file in_file{"host=from-file password=s1\n"};
  temp_file in_env{"host=from-env password=s2\n"};
  temp_file on_cli{"host=from-cli password=s3\n"};
  temp_file ini{"dsn-file = \"" + in_file.path()
                + "\"\n[worker]\ndomains = [\"d\"]\n"};
  auto cfg = load({"--config", ini.path()}, fake_env{}.lookup());
  EXPECT_EQ(cfg.dsn, "host=from-file password=s1");
  EXPECT_EQ(cfg.dsn_file, "");
  // The environment wins over the file, with a DSN or a DSN file.
  cfg = load({"--config", ini.path()},
             fake_env{{{"CMDBUS_DSN", "host=env"}}}.lookup());
  EXPECT_EQ(cfg.dsn, "host=env");
  fake_env env{{{"CMDBUS_DSN_FILE", in_env.path()}}};
  cfg = load({"--config", ini.path()}, env.lookup());
  EXPECT_EQ(cfg.dsn, "host=from-env password=s2");
  // The command line wins over both.
  cfg = load({"--config", ini.path(), "--dsn-file", on_cli.path()},
             env.lookup());
  EXPECT_EQ(cfg.dsn, "host=from-cli password=s3");
  cfg = load({"--config", ini.path(), "--dsn=host=cli"}, env.lookup());
  EXPECT_EQ(cfg.dsn, "host=cli");
  // --dump-config masks what the file held.
  cfg = load({"--config", ini.path()}, env.lookup());
  EXPECT_TRUE(contains(describe(cfg), "password=***")) << describe(cfg);
  EXPECT_FALSE(contains(describe(cfg), "s2")) << describe(cfg);
  // apply_env() reads it too.
  worker_config only_env;
  apply_env(only_env, env.lookup());
  EXPECT_EQ(only_env.dsn, "host=from-env password=s2");
}

TEST(ConfigDsnFile, one_place_gives_a_dsn_or_a_dsn_file_not_both) {
  temp_file dsn{"host=db\n"};
  temp_file both{"dsn = \"host=ini\"\ndsn-file = \"" + dsn.path()
                 + "\"\n[worker]\ndomains = [\"d\"]\n"};
  EXPECT_EQ(error_of([&] {
              load({"--config", both.path()}, fake_env{}.lookup());
            }),
            "the config file sets both dsn and dsn-file: keep one");
  EXPECT_EQ(error_of([&] {
              load({"--domain", "d"},
                   fake_env{{{"CMDBUS_DSN", "host=env"},
                             {"CMDBUS_DSN_FILE", dsn.path()}}}
                     .lookup());
            }),
            "set CMDBUS_DSN or CMDBUS_DSN_FILE in the environment, not both");
  EXPECT_EQ(error_of([&] {
              load({"--domain", "d", "--dsn-file", dsn.path(), "--dsn",
                    "host=cli"},
                   fake_env{}.lookup());
            }),
            "give --dsn or --dsn-file, not both");
  // A later place that gives one settles it.
  auto cfg = load({"--config", both.path(), "--dsn", "host=cli"},
                  fake_env{}.lookup());
  EXPECT_EQ(cfg.dsn, "host=cli");
}

TEST(ConfigDsnFile, refuses_a_file_others_may_read_naming_where_it_came_from) {
  temp_file open{"host=db password=s3cret\n"};
  ::chmod(open.path().c_str(), 0640);
  auto err = error_of([&] {
    load({"--domain", "d", "--dsn-file", open.path()}, fake_env{}.lookup());
  });
  EXPECT_EQ(err.rfind("option --dsn-file cannot be used: DSN file \""
                        + open.path()
                        + "\": its group or others have access (mode 0640)",
                      0),
            0u)
    << err;
  EXPECT_TRUE(contains(err, "chmod 600")) << err;
  EXPECT_FALSE(contains(err, "s3cret")) << err;
  err = error_of([&] {
    load({"--domain", "d"},
         fake_env{{{"CMDBUS_DSN_FILE", open.path()}}}.lookup());
  });
  EXPECT_EQ(err.rfind("environment variable CMDBUS_DSN_FILE cannot be used: "
                      "DSN file",
                      0),
            0u)
    << err;
  EXPECT_FALSE(contains(err, "s3cret")) << err;
  temp_file ini{"dsn-file = \"" + open.path()
                + "\"\n[worker]\ndomains = [\"d\"]\n"};
  err = error_of([&] { load({"--config", ini.path()}, fake_env{}.lookup()); });
  EXPECT_EQ(err.rfind("key 'dsn-file' of the config file cannot be used: "
                      "DSN file",
                      0),
            0u)
    << err;
  EXPECT_TRUE(contains(err, "(mode 0640)")) << err;
  EXPECT_FALSE(contains(err, "s3cret")) << err;
  err = error_of([] {
    load({"--domain", "d", "--dsn-file", "/nonexistent/dsn"},
         fake_env{}.lookup());
  });
  EXPECT_EQ(err, "option --dsn-file cannot be used: DSN file "
                 "\"/nonexistent/dsn\": No such file or directory");
}

// -- the HTTP endpoint's address ----------------------------------------------

TEST(ConfigHttp, is_off_by_default_and_read_from_every_source) {
  EXPECT_EQ(worker_config{}.http, "");
  worker_config cfg;
  apply_ini(cfg, "[worker]\nhttp = \"127.0.0.1:9464\"\n", "w.ini");
  EXPECT_EQ(cfg.http, "127.0.0.1:9464");
  apply_env(cfg, fake_env{{{"CMDBUS_HTTP", "0.0.0.0:9000"}}}.lookup());
  EXPECT_EQ(cfg.http, "0.0.0.0:9000");
  apply_args(cfg, {"--http", ":9100"});
  EXPECT_EQ(cfg.http, ":9100");
  EXPECT_TRUE(contains(describe(cfg), "http = \":9100\"")) << describe(cfg);
  worker_config again;
  apply_ini(again, describe(cfg), "dump.ini");
  EXPECT_EQ(again.http, ":9100");
}

TEST(ConfigHttp, parses_addresses) {
  auto a = parse_http_address("127.0.0.1:9464");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 9464);
  a = parse_http_address(":9464");
  EXPECT_EQ(a.host, "127.0.0.1"); // loopback unless told otherwise
  a = parse_http_address("[::1]:0");
  EXPECT_EQ(a.host, "::1");
  EXPECT_EQ(a.port, 0);
  a = parse_http_address("metrics-host.local:80");
  EXPECT_EQ(a.host, "metrics-host.local");
}

TEST(ConfigHttp, rejects_bad_addresses_with_the_rule) {
  auto cfg = valid();
  for (auto* bad : {"9464", "127.0.0.1:", "127.0.0.1:65536", "host:port",
                    "::1:9464", "a b:80", "127.0.0.1:-1"}) {
    cfg.http = bad;
    auto problems = validate(cfg);
    ASSERT_EQ(problems.size(), 1u) << bad;
    EXPECT_TRUE(contains(problems[0], "http (")) << problems[0];
  }
  cfg.http = "127.0.0.1:70000";
  EXPECT_TRUE(has_problem(validate(cfg), "the port must be a number from 0 "
                                         "to 65535"));
  cfg.http = "[::1]:9464";
  EXPECT_TRUE(validate(cfg).empty());
}

// -- remote handler pools and TLS ---------------------------------------------

TEST(ConfigRemote, is_off_by_default_and_read_from_every_source) {
  worker_config cfg;
  EXPECT_TRUE(cfg.remote.pools.empty());
  EXPECT_FALSE(cfg.tls.enabled());
  apply_ini(cfg,
            "[remote]\npools = [\"h1:7400\", \"h2:7400\"]\n"
            "connect-timeout = 2s\nreconnect-max = 5s\n"
            "heartbeat-interval = 500ms\n"
            "[tls]\ncertificate = \"w.pem\"\nkey = \"w.key\"\n"
            "ca-file = \"ca.pem\"\n",
            "w.ini");
  EXPECT_EQ(cfg.remote.pools, (std::vector<std::string>{"h1:7400", "h2:7400"}));
  EXPECT_EQ(cfg.remote.connect_timeout, std::chrono::milliseconds{2000});
  EXPECT_EQ(cfg.remote.reconnect_max, std::chrono::milliseconds{5000});
  EXPECT_EQ(cfg.remote.heartbeat_interval, std::chrono::milliseconds{500});
  EXPECT_EQ(cfg.tls.certificate, "w.pem");
  EXPECT_EQ(cfg.tls.key, "w.key");
  EXPECT_EQ(cfg.tls.ca_file, "ca.pem");
  apply_env(cfg, fake_env{{{"CMDBUS_REMOTE_POOLS", "h3:1,h4:2"},
                           {"CMDBUS_TLS_PASSPHRASE", "pw"},
                           {"CMDBUS_REMOTE_HEARTBEAT_INTERVAL", "2s"}}}
                   .lookup());
  EXPECT_EQ(cfg.remote.pools, (std::vector<std::string>{"h3:1", "h4:2"}));
  EXPECT_EQ(cfg.tls.passphrase, "pw");
  EXPECT_EQ(cfg.remote.heartbeat_interval, std::chrono::milliseconds{2000});
  // --remote-pool repeats and replaces the others.
  apply_args(cfg, {"--remote-pool", "a:1", "--remote-pool=b:2",
                   "--tls-ca-path", "/etc/ssl/certs"});
  EXPECT_EQ(cfg.remote.pools, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(cfg.tls.ca_path, "/etc/ssl/certs");
}

TEST(ConfigRemote, validates_addresses_ranges_and_the_tls_set) {
  auto cfg = valid();
  cfg.remote.pools = {"h1:7400", "nowhere", "h1:7400", "h2:0"};
  cfg.remote.heartbeat_interval = std::chrono::milliseconds{10};
  cfg.remote.connect_timeout = std::chrono::minutes{5};
  cfg.tls.certificate = "/nonexistent/w.pem";
  auto problems = validate(cfg);
  std::string all;
  for (auto& p : problems)
    all += p + "\n";
  EXPECT_TRUE(has_problem(problems, "remote pools: \"nowhere\"")) << all;
  EXPECT_TRUE(has_problem(problems, "\"h1:7400\" is listed twice"));
  EXPECT_TRUE(has_problem(problems, "remote pools: \"h2:0\""));
  EXPECT_TRUE(has_problem(problems, "remote-heartbeat-interval (10ms)"));
  EXPECT_TRUE(has_problem(problems, "remote-connect-timeout"));
  EXPECT_TRUE(has_problem(problems, "tls-key"));
  EXPECT_TRUE(validate(valid()).empty());
}

TEST(ConfigRemote, describe_round_trips_and_never_prints_the_passphrase) {
  auto cfg = valid();
  cfg.remote.pools = {"h1:7400", "[::1]:7401"};
  cfg.remote.heartbeat_interval = std::chrono::milliseconds{500};
  cfg.tls.certificate = "w.pem";
  cfg.tls.key = "w.key";
  cfg.tls.ca_file = "ca.pem";
  cfg.tls.passphrase = "very-secret";
  auto text = describe(cfg);
  EXPECT_FALSE(contains(text, "very-secret")) << text;
  EXPECT_TRUE(contains(text, "passphrase: set (not shown)")) << text;
  EXPECT_TRUE(contains(text, "pools = [\"h1:7400\", \"[::1]:7401\"]")) << text;
  worker_config again;
  apply_ini(again, text, "dump.ini");
  EXPECT_EQ(again.remote.pools, cfg.remote.pools);
  EXPECT_EQ(again.remote.heartbeat_interval, cfg.remote.heartbeat_interval);
  EXPECT_EQ(again.tls.certificate, "w.pem");
  EXPECT_EQ(again.tls.passphrase, "");
  // Without pools or TLS, describe() says nothing about them.
  auto plain = describe(valid());
  EXPECT_FALSE(contains(plain, "[remote]")) << plain;
  EXPECT_FALSE(contains(plain, "[tls]")) << plain;
}

// -- [domains.NAME] dsn: a domain on its own database ------------------------

TEST(ConfigDomainDsn, falls_back_to_the_worker_dsn) {
  auto cfg = valid();
  cfg.dsn = "host=one";
  EXPECT_EQ(dsn_for(cfg, "payments"), "host=one");
  cfg.domains = {"payments", "reports", "audit"};
  cfg.domain_dsn["reports"] = "host=two";
  EXPECT_EQ(dsn_for(cfg, "reports"), "host=two");
  EXPECT_EQ(dsn_for(cfg, "audit"), "host=one");
  auto groups = group_by_dsn(cfg, cfg.domains);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].dsn, "host=one");
  EXPECT_EQ(groups[0].domains, (std::vector<std::string>{"payments", "audit"}));
  EXPECT_EQ(groups[1].dsn, "host=two");
  EXPECT_EQ(groups[1].domains, (std::vector<std::string>{"reports"}));
}

TEST(ConfigDomainDsn, is_read_from_every_source) {
  worker_config cfg;
  apply_ini(cfg,
            "dsn = \"host=one\"\n[worker]\ndomains = [\"a\", \"b\"]\n"
            "[domains.b]\ndsn = \"host=two\"\n",
            "worker.ini");
  EXPECT_EQ(cfg.domain_dsn,
            (std::map<std::string, std::string>{{"b", "host=two"}}));
  // The environment: one variable per served domain.
  worker_config env_cfg;
  apply_env(env_cfg, fake_env{{{"CMDBUS_DOMAINS", "a,b"},
                               {"CMDBUS_DOMAIN_DSN_a", "host=env"},
                               {"CMDBUS_DOMAIN_DSN_c", "host=unread"}}}
                       .lookup());
  EXPECT_EQ(env_cfg.domain_dsn,
            (std::map<std::string, std::string>{{"a", "host=env"}}));
  // The command line: NAME=DSN, repeated, the DSN may hold '='.
  worker_config cli;
  apply_args(cli, {"--domain-dsn", "a=host=x port=5433",
                   "--domain-dsn=b=postgresql://u@y/app", "--domain-dsn",
                   "a=host=z"});
  EXPECT_EQ(cli.domain_dsn,
            (std::map<std::string, std::string>{
              {"a", "host=z"}, {"b", "postgresql://u@y/app"}}));
}

TEST(ConfigDomainDsn, file_then_env_then_cli) {
  temp_file file{"[worker]\ndomains = [\"a\", \"b\", \"c\"]\n"
                 "[domains.a]\ndsn = \"host=file\"\n"
                 "[domains.b]\ndsn = \"host=file\"\n"};
  fake_env env{{{"CMDBUS_CONFIG", file.path()},
                {"CMDBUS_DOMAIN_DSN_b", "host=env"},
                {"CMDBUS_DOMAIN_DSN_c", "host=env"},
                {"CMDBUS_DOMAIN_DSN_d", "host=env"}}};
  auto cfg = load({"--domain-dsn", "c=host=cli"}, env.lookup());
  EXPECT_EQ(cfg.domain_dsn, (std::map<std::string, std::string>{
                              {"a", "host=file"},
                              {"b", "host=env"},
                              {"c", "host=cli"}}));
  // A domain added on the command line gets its variable too; variables of
  // domains not served are not read.
  cfg = load({"--domain", "a", "--domain", "d"},
             fake_env{{{"CMDBUS_DOMAIN_DSN_d", "host=env"},
                       {"CMDBUS_DOMAIN_DSN_b", "host=env"}}}
               .lookup());
  EXPECT_EQ(cfg.domain_dsn,
            (std::map<std::string, std::string>{{"d", "host=env"}}));
}

TEST(ConfigDomainDsn, reports_bad_entries) {
  EXPECT_EQ(ini_error("[domains.a]\nconcurrency = 4\n"),
            "worker.ini:2: unknown key 'concurrency' in section [domains.a] "
            "(a [domains.NAME] section holds 'dsn', 'priorities', "
            "'fifo-every' or 'schedules')");
  EXPECT_EQ(ini_error("[domains.a]\ndsn = \"x\"\n[domains.a]\ndsn = \"y\"\n"),
            "worker.ini:4: duplicate key 'dsn' in section [domains.a] (first "
            "set on line 2)");
  EXPECT_EQ(ini_error("[domains.a]\ndsn = host=x\n"),
            "worker.ini:2: key 'dsn' in section [domains.a] expects a quoted "
            "string");
  EXPECT_TRUE(contains(ini_error("[domains.]\n"), "unknown section"));
  EXPECT_TRUE(contains(ini_error("[domains.a.b]\n"), "unknown section"));
  worker_config cfg;
  auto err = error_of([&] { apply_args(cfg, {"--domain-dsn", "nodsn"}); });
  EXPECT_EQ(err, "option --domain-dsn expects NAME=DSN (a served domain and "
                 "its DSN)");
  err = error_of([&] { apply_args(cfg, {"--domain-dsn", "a="}); });
  EXPECT_TRUE(contains(err, "with a DSN after the '='")) << err;
  err = error_of([&] { apply_args(cfg, {"--domain-dsn"}); });
  EXPECT_TRUE(contains(err, "needs a value")) << err;
}

TEST(ConfigDomainDsn, names_a_served_domain) {
  auto cfg = valid();
  cfg.domain_dsn["payments"] = "host=two";
  EXPECT_TRUE(validate(cfg).empty());
  cfg.domain_dsn["paymnets"] = "host=two password=secret";
  auto problems = validate(cfg);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(contains(problems[0], "domain-dsn: \"paymnets\" is not a "
                                    "served domain"))
    << problems[0];
  EXPECT_FALSE(contains(problems[0], "secret")) << problems[0];
}

TEST(ConfigDomainDsn, describe_masks_and_round_trips) {
  auto cfg = valid();
  cfg.domains = {"payments", "reports"};
  cfg.domain_dsn["reports"] = "host=two password=secret";
  auto text = describe(cfg);
  EXPECT_FALSE(contains(text, "secret")) << text;
  EXPECT_TRUE(contains(text, "[domains.reports]\ndsn = \"host=two "
                             "password=***\"\n"))
    << text;
  worker_config again;
  apply_ini(again, text, "dump.ini");
  EXPECT_EQ(again.domain_dsn.at("reports"), "host=two password=***");
  EXPECT_EQ(describe(again), text);
  EXPECT_FALSE(contains(describe(valid()), "[domains.")) << describe(valid());
}

// -- the admin port -------------------------------------------------------------

TEST(ConfigAdmin, off_by_default_read_from_every_source_checked_described) {
  worker_config cfg;
  EXPECT_TRUE(cfg.admin.empty());
  EXPECT_FALSE(contains(describe(valid()), "[admin]"));
  apply_ini(cfg, "[admin]\nlisten = \"127.0.0.1:7500\"\n", "w.ini");
  EXPECT_EQ(cfg.admin, "127.0.0.1:7500");
  apply_env(cfg, fake_env{{{"CMDBUS_ADMIN", ":7501"}}}.lookup());
  EXPECT_EQ(cfg.admin, ":7501");
  apply_args(cfg, {"--admin", "0.0.0.0:7502"});
  EXPECT_EQ(cfg.admin, "0.0.0.0:7502");
  auto text = describe(cfg);
  EXPECT_TRUE(contains(text, "[admin]\nlisten = \"0.0.0.0:7502\"")) << text;
  worker_config again;
  apply_ini(again, text, "dump.ini");
  EXPECT_EQ(again.admin, cfg.admin);
  auto bad = valid();
  bad.admin = "nowhere:port";
  EXPECT_TRUE(has_problem(validate(bad), "admin (\"nowhere:port\")"));
  EXPECT_TRUE(contains(worker_help(), "--admin HOST:PORT"));
}

// -- tick runs ([tick]) and the loop timing ([worker]) ------------------------

TEST(ConfigTick, none_by_default_read_from_every_source_checked_described) {
  worker_config cfg;
  EXPECT_TRUE(cfg.tick_runners.empty());
  EXPECT_EQ(cfg.tick_max_duration, 0ms);
  EXPECT_EQ(cfg.tick_runner_max_items, 0);
  EXPECT_EQ(cfg.tick_shard_count, 0);
  apply_ini(cfg,
            "[tick]\nrunners = [\"jobs\", \"commands\"]\nmax-duration = 8min\n"
            "runner-max-duration = 1min\nrunner-max-items = 200\n"
            "shard-index = 1\nshard-count = 3\n",
            "w.ini");
  EXPECT_EQ(cfg.tick_runners, (std::vector<std::string>{"jobs", "commands"}));
  EXPECT_EQ(cfg.tick_max_duration, 480000ms);
  EXPECT_EQ(cfg.tick_runner_max_duration, 60000ms);
  EXPECT_EQ(cfg.tick_runner_max_items, 200);
  EXPECT_EQ(cfg.tick_shard_index, 1);
  EXPECT_EQ(cfg.tick_shard_count, 3);
  apply_env(cfg, fake_env{{{"CMDBUS_TICK_RUNNERS", "commands"},
                           {"CMDBUS_TICK_RUNNER_MAX_ITEMS", "7"}}}
                   .lookup());
  EXPECT_EQ(cfg.tick_runners, (std::vector<std::string>{"commands"}));
  EXPECT_EQ(cfg.tick_runner_max_items, 7);
  apply_args(cfg, {"--tick-max-duration", "30s", "--shard-index", "2"});
  EXPECT_EQ(cfg.tick_max_duration, 30000ms);
  EXPECT_EQ(cfg.tick_shard_index, 2);
  auto text = describe(cfg);
  worker_config again;
  apply_ini(again, text, "dump.ini");
  EXPECT_EQ(again.tick_runners, cfg.tick_runners);
  EXPECT_EQ(again.tick_max_duration, cfg.tick_max_duration);
  EXPECT_EQ(again.tick_runner_max_items, cfg.tick_runner_max_items);
  EXPECT_EQ(again.tick_shard_index, 2);
  auto bad = valid();
  bad.tick_shard_count = 2;
  bad.tick_shard_index = 2;
  EXPECT_TRUE(has_problem(validate(bad), "shard-index (2) must be between 0"));
  bad = valid();
  bad.tick_shard_index = 1;
  EXPECT_TRUE(has_problem(validate(bad), "needs a shard-count above 1"));
  bad = valid();
  bad.tick_runners = {"jobs", "jobs"};
  EXPECT_TRUE(has_problem(validate(bad), "\"jobs\" is listed twice"));
  bad = valid();
  bad.tick_runner_max_items = -1;
  EXPECT_TRUE(has_problem(validate(bad), "runner-max-items (-1)"));
}

TEST(ConfigLoopTiming, defaults_are_the_earlier_timings) {
  auto cfg = valid();
  cfg.poll_interval = 1000ms;
  EXPECT_EQ(cfg.busy_delay, 0ms);
  EXPECT_EQ(idle_backoff_min_of(cfg), 250ms);
  EXPECT_EQ(idle_backoff_max_of(cfg), 1000ms);
  EXPECT_DOUBLE_EQ(cfg.idle_jitter, 0.2);
  EXPECT_EQ(cfg.error_backoff_max, 5000ms);
  apply_ini(cfg,
            "[worker]\nbusy-delay = 250ms\nidle-backoff-min = 1s\n"
            "idle-backoff-max = 30s\nidle-jitter = 0.5\n"
            "error-backoff-max = 30s\n",
            "w.ini");
  EXPECT_EQ(cfg.busy_delay, 250ms);
  EXPECT_EQ(idle_backoff_min_of(cfg), 1000ms);
  EXPECT_EQ(idle_backoff_max_of(cfg), 30000ms);
  EXPECT_DOUBLE_EQ(cfg.idle_jitter, 0.5);
  EXPECT_EQ(cfg.error_backoff_max, 30000ms);
  EXPECT_TRUE(validate(cfg).empty());
  auto bad = cfg;
  bad.idle_backoff_max = 500ms;
  EXPECT_TRUE(has_problem(validate(bad), "idle-backoff-max (500ms)"));
  bad = cfg;
  bad.idle_jitter = 1.5;
  EXPECT_TRUE(has_problem(validate(bad), "idle-jitter"));
  bad = cfg;
  bad.error_backoff_max = 10ms;
  EXPECT_TRUE(has_problem(validate(bad), "error-backoff-max (10ms)"));
}

// -- priorities and per-type caps ([domains.NAME], [domains.NAME.types.T]) ---

TEST(ConfigScheduling, is_read_from_the_file_and_described_back) {
  worker_config cfg;
  apply_ini(cfg,
            "[worker]\ndomains = [\"reports\", \"payments\"]\n"
            "[domains.reports]\npriorities = true\nfifo-every = 4\n"
            "[domains.reports.types.RenderPdf]\nconcurrency = 2\n"
            "[domains.payments.types.Refund]\nconcurrency = 1\n",
            "worker.ini");
  const auto& reports = scheduling_of(cfg, "reports");
  EXPECT_TRUE(reports.priorities);
  EXPECT_EQ(reports.fifo_every, 4);
  EXPECT_EQ(reports.type_concurrency,
            (std::map<std::string, int>{{"RenderPdf", 2}}));
  const auto& payments = scheduling_of(cfg, "payments");
  EXPECT_FALSE(payments.priorities);
  EXPECT_EQ(payments.fifo_every, 10);
  EXPECT_EQ(payments.type_concurrency,
            (std::map<std::string, int>{{"Refund", 1}}));
  EXPECT_TRUE(validate(cfg).empty());
  // A domain without an entry reads as the reference does.
  EXPECT_FALSE(scheduling_of(cfg, "other").chooses());
  auto text = describe(cfg);
  worker_config again;
  apply_ini(again, text, "described.ini");
  EXPECT_EQ(describe(again), text);
  EXPECT_TRUE(contains(text, "[domains.reports.types.RenderPdf]\n"
                             "concurrency = 2\n"))
    << text;
}

TEST(ConfigScheduling, schedules_are_fired_unless_a_domain_turns_them_off) {
  worker_config cfg;
  apply_ini(cfg,
            "[worker]\ndomains = [\"reports\", \"payments\"]\n"
            "[domains.reports]\nschedules = false\n",
            "worker.ini");
  EXPECT_FALSE(scheduling_of(cfg, "reports").schedules);
  EXPECT_TRUE(scheduling_of(cfg, "payments").schedules);
  EXPECT_TRUE(cfg.run_schedules);
  EXPECT_TRUE(validate(cfg).empty());
  auto text = describe(cfg);
  EXPECT_TRUE(contains(text, "[domains.reports]\n")) << text;
  EXPECT_TRUE(contains(text, "schedules = false\n")) << text;
  worker_config again;
  apply_ini(again, text, "described.ini");
  EXPECT_FALSE(scheduling_of(again, "reports").schedules);
  EXPECT_EQ(describe(again), text);
  EXPECT_TRUE(contains(ini_error("[domains.a]\nschedules = 0\n"),
                       "schedules"));
}

TEST(ConfigScheduling, reports_bad_entries) {
  EXPECT_EQ(ini_error("[domains.a.types.T]\ndsn = \"x\"\n"),
            "worker.ini:2: unknown key 'dsn' in section [domains.a.types.T] "
            "(a [domains.NAME.types.TYPE] section holds 'concurrency' or "
            "'exec-timeout')");
  EXPECT_EQ(ini_error("[domains.a.types.T]\nconcurrency = 1\n"
                      "[domains.a.types.T]\nconcurrency = 2\n"),
            "worker.ini:4: duplicate key 'concurrency' in section "
            "[domains.a.types.T] (first set on line 2)");
  EXPECT_TRUE(contains(ini_error("[domains.a.types.T]\nconcurrency = x\n"),
                       "expects an integer"));
  EXPECT_TRUE(
    contains(ini_error("[domains.a]\npriorities = 1\n"), "priorities"));
  EXPECT_TRUE(contains(ini_error("[domains.a.types.]\n"), "unknown section"));
  EXPECT_TRUE(contains(ini_error("[domains.a.kinds.T]\n"), "unknown section"));
  EXPECT_TRUE(
    contains(ini_error("[domains.a.types.T.U]\n"), "unknown section"));
  auto cfg = valid();
  cfg.scheduling["payments"].type_concurrency["Slow"] = 0;
  cfg.scheduling["payments"].fifo_every = 0;
  cfg.scheduling["other"].priorities = true;
  auto problems = validate(cfg);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_TRUE(contains(problems[0], "not a served domain")) << problems[0];
  EXPECT_EQ(problems[1],
            "fifo-every of domain \"payments\" (0) must be between 1 and "
            "1000");
  EXPECT_EQ(problems[2],
            "concurrency of type \"Slow\" in domain \"payments\" (0) must "
            "be between 1 and 4096");
}

// -- [retention] --------------------------------------------------------------

TEST(ConfigRetention, is_off_by_default_and_reads_ages_in_days) {
  EXPECT_FALSE(valid().retention.enabled());
  auto cfg = valid();
  apply_ini(cfg,
            "[retention]\ncommands = 30d\narchive = 12h\ninterval = 10min\n"
            "chunk-size = 500\npause = 20ms\n",
            "worker.ini");
  EXPECT_TRUE(cfg.retention.enabled());
  EXPECT_EQ(cfg.retention.ages.commands, std::chrono::milliseconds{30 * 86'400'000LL});
  EXPECT_EQ(cfg.retention.ages.archive, std::chrono::milliseconds{12 * 3'600'000LL});
  EXPECT_FALSE(cfg.retention.ages.processes);
  EXPECT_FALSE(cfg.retention.ages.batches);
  EXPECT_EQ(cfg.retention.interval, 10min);
  EXPECT_EQ(cfg.retention.chunk_size, 500);
  EXPECT_EQ(cfg.retention.pause, 20ms);
  EXPECT_TRUE(validate(cfg).empty());
  // describe() writes the section back in days, and it reads back the same.
  auto text = describe(cfg);
  EXPECT_TRUE(contains(text, "[retention]\ncommands = 30d\narchive = 12h\n"))
    << text;
  worker_config again;
  apply_ini(again, text, "described.ini");
  EXPECT_EQ(again.retention.ages.commands, cfg.retention.ages.commands);
  EXPECT_EQ(again.retention.chunk_size, 500);
}

TEST(ConfigRetention, rejects_bad_values) {
  auto cfg = valid();
  cfg.retention.ages.batches = 500ms;
  cfg.retention.chunk_size = 0;
  cfg.retention.interval = 2 * 86'400'000ms;
  cfg.retention.pause = 2min;
  auto problems = validate(cfg);
  EXPECT_TRUE(has_problem(problems, "retention batches (500ms) must be at least 1s"));
  EXPECT_TRUE(has_problem(problems, "retention chunk-size (0)"));
  EXPECT_TRUE(has_problem(problems, "retention interval (48h)"));
  EXPECT_TRUE(has_problem(problems, "retention pause (2min)"));
  EXPECT_TRUE(contains(ini_error("[retention]\ncommands = 30days\n"),
                       "expects a duration"));
  EXPECT_TRUE(contains(ini_error("[retention]\nkeep = 30d\n"), "keep"));
}
