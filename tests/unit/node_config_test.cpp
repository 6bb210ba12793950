// A handler node's configuration (config/node_config.hpp), read like the
// worker's: the file, the CMDBUS_NODE_* / CMDBUS_TLS_* environment, the
// command line, their precedence, validation, --help, --dump-config
// (describe), and the sample deploy/node.ini.

#include "cmdbus/config/node_config.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>

#include "tests/support/config_fakes.hpp"

using namespace cmdbus::config;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {


std::string ini_error(std::string_view text) {
  return error_of([&] {
    node_config cfg;
    apply_ini(cfg, text, "node.ini");
  });
}

std::string args_error(const std::vector<std::string>& args) {
  return error_of([&] {
    node_config cfg;
    apply_args(cfg, args);
  });
}

constexpr const char* full_ini = R"(; a handler node
[node]
domains = ["payments", "reports"]
concurrency = 8
listen = "0.0.0.0:7401"
port-file = "/run/cmdbus/node.port"
name = "node-7"
heartbeat = 500ms
shutdown-timeout = 1min

[tls]
certificate = "/etc/cmdbus/node.pem"
key = "/etc/cmdbus/node.key"
ca-file = "/etc/cmdbus/ca.pem"
ca-path = "/etc/cmdbus/ca.d"
passphrase = "s3cret"

[admin]
listen = ":7501"
)";

} // namespace

// -- the file
// ------------------------------------------------------------------

TEST(NodeConfigIni, applies_every_setting) {
  node_config cfg;
  apply_ini(cfg, full_ini, "node.ini");
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"payments", "reports"}));
  EXPECT_EQ(cfg.concurrency, 8);
  EXPECT_EQ(cfg.listen, "0.0.0.0:7401");
  EXPECT_EQ(cfg.port_file, "/run/cmdbus/node.port");
  EXPECT_EQ(cfg.name, "node-7");
  EXPECT_EQ(cfg.heartbeat_interval, 500ms);
  EXPECT_EQ(cfg.shutdown_timeout, 1min);
  EXPECT_EQ(cfg.tls.certificate, "/etc/cmdbus/node.pem");
  EXPECT_EQ(cfg.tls.key, "/etc/cmdbus/node.key");
  EXPECT_EQ(cfg.tls.ca_file, "/etc/cmdbus/ca.pem");
  EXPECT_EQ(cfg.tls.ca_path, "/etc/cmdbus/ca.d");
  EXPECT_EQ(cfg.tls.passphrase, "s3cret");
  EXPECT_EQ(cfg.admin, ":7501");
}

TEST(NodeConfigIni, reports_unknown_and_misplaced_keys_and_sections) {
  EXPECT_EQ(ini_error("[node]\nlistn = \":0\"\n"),
            "node.ini:2: unknown key 'listn' in section [node] (did you mean "
            "'listen'?)");
  EXPECT_EQ(ini_error("concurrency = 4\n"),
            "node.ini:1: unknown key 'concurrency' at the top level "
            "('concurrency' belongs in section [node])");
  EXPECT_EQ(ini_error("[worker]\ndomains = [\"a\"]\n"),
            "node.ini:1: unknown section [worker] (expected [node], [tls] or "
            "[admin])");
  EXPECT_EQ(ini_error("[node]\nconcurrency = many\n"),
            "node.ini:2: key 'concurrency' in section [node] expects an "
            "integer, got \"many\"");
  EXPECT_EQ(ini_error("[node]\nname = \"a\"\nname = \"b\"\n"),
            "node.ini:3: duplicate key 'name' in section [node] (first set "
            "on line 2)");
  // A bare integer is seconds; another unit is refused.
  node_config cfg;
  apply_ini(cfg, "[node]\nheartbeat = 2\n", "node.ini");
  EXPECT_EQ(cfg.heartbeat_interval, 2s);
  EXPECT_TRUE(
    contains(ini_error("[node]\nheartbeat = 2 days\n"), "node.ini:2: "));
}

// -- the environment
// -----------------------------------------------------------

TEST(NodeConfigEnv, applies_every_variable) {
  fake_env env{{{"CMDBUS_NODE_DOMAINS", "a, b"},
                {"CMDBUS_NODE_CONCURRENCY", "3"},
                {"CMDBUS_NODE_LISTEN", "127.0.0.2:0"},
                {"CMDBUS_NODE_PORT_FILE", "/tmp/p"},
                {"CMDBUS_NODE_NAME", "env-node"},
                {"CMDBUS_NODE_HEARTBEAT", "250ms"},
                {"CMDBUS_NODE_SHUTDOWN_TIMEOUT", "5"},
                {"CMDBUS_NODE_ADMIN", ":7600"},
                {"CMDBUS_TLS_CERTIFICATE", "c.pem"},
                {"CMDBUS_TLS_KEY", "k.pem"},
                {"CMDBUS_TLS_CA_FILE", "ca.pem"},
                {"CMDBUS_TLS_CA_PATH", "ca.d"},
                {"CMDBUS_TLS_PASSPHRASE", "pw"}}};
  node_config cfg;
  apply_env(cfg, env.lookup());
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cfg.concurrency, 3);
  EXPECT_EQ(cfg.listen, "127.0.0.2:0");
  EXPECT_EQ(cfg.port_file, "/tmp/p");
  EXPECT_EQ(cfg.name, "env-node");
  EXPECT_EQ(cfg.heartbeat_interval, 250ms);
  EXPECT_EQ(cfg.shutdown_timeout, 5s);
  EXPECT_EQ(cfg.admin, ":7600");
  EXPECT_EQ(cfg.tls.certificate, "c.pem");
  EXPECT_EQ(cfg.tls.key, "k.pem");
  EXPECT_EQ(cfg.tls.ca_file, "ca.pem");
  EXPECT_EQ(cfg.tls.ca_path, "ca.d");
  EXPECT_EQ(cfg.tls.passphrase, "pw");
}

TEST(NodeConfigEnv, ignores_empty_variables_and_names_bad_ones) {
  node_config cfg;
  apply_env(
    cfg, fake_env{{{"CMDBUS_NODE_NAME", ""}, {"CMDBUS_NODE_CONCURRENCY", ""}}}
           .lookup());
  EXPECT_EQ(cfg.name, "");
  EXPECT_EQ(cfg.concurrency, 16);
  EXPECT_EQ(
    error_of([] {
      node_config c;
      apply_env(c, fake_env{{{"CMDBUS_NODE_CONCURRENCY", "x"}}}.lookup());
    }),
    "environment variable CMDBUS_NODE_CONCURRENCY expects an integer, "
    "got \"x\"");
  EXPECT_TRUE(contains(
    error_of([] {
      node_config c;
      apply_env(c, fake_env{{{"CMDBUS_NODE_HEARTBEAT", "soon"}}}.lookup());
    }),
    "environment variable CMDBUS_NODE_HEARTBEAT expects"));
  // The worker's variables are not the node's.
  apply_env(
    cfg, fake_env{{{"CMDBUS_DOMAINS", "w"}, {"CMDBUS_ADMIN", ":1"}}}.lookup());
  EXPECT_TRUE(cfg.domains.empty());
  EXPECT_EQ(cfg.admin, "");
}

// -- the command line
// ----------------------------------------------------------

TEST(NodeConfigArgs, applies_every_option) {
  node_config cfg;
  cfg.domains = {"from_file"};
  auto file = apply_args(cfg, {"--domain",
                               "a",
                               "--concurrency=5",
                               "--listen",
                               ":0",
                               "--port-file",
                               "/tmp/port",
                               "--name",
                               "cli-node",
                               "--heartbeat",
                               "2s",
                               "--shutdown-timeout",
                               "10s",
                               "--admin",
                               ":7700",
                               "--tls-certificate",
                               "c",
                               "--tls-key",
                               "k",
                               "--tls-ca-file",
                               "ca",
                               "--tls-ca-path",
                               "d",
                               "--tls-passphrase",
                               "pw",
                               "--domain",
                               "b",
                               "--config",
                               "node.ini",
                               "--dump-config"});
  EXPECT_EQ(file, std::optional<std::string>{"node.ini"});
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cfg.concurrency, 5);
  EXPECT_EQ(cfg.listen, ":0");
  EXPECT_EQ(cfg.port_file, "/tmp/port");
  EXPECT_EQ(cfg.name, "cli-node");
  EXPECT_EQ(cfg.heartbeat_interval, 2s);
  EXPECT_EQ(cfg.shutdown_timeout, 10s);
  EXPECT_EQ(cfg.admin, ":7700");
  EXPECT_EQ(cfg.tls.certificate, "c");
  EXPECT_EQ(cfg.tls.key, "k");
  EXPECT_EQ(cfg.tls.ca_file, "ca");
  EXPECT_EQ(cfg.tls.ca_path, "d");
  EXPECT_EQ(cfg.tls.passphrase, "pw");
  EXPECT_TRUE(cfg.dump_config);
}

TEST(NodeConfigArgs, reports_bad_command_lines) {
  EXPECT_EQ(args_error({"--listn", ":0"}),
            "unknown option '--listn'; did you mean --listen?");
  EXPECT_EQ(args_error({"--concurrency"}),
            "option --concurrency needs a value");
  EXPECT_EQ(args_error({"--concurrency", "x"}),
            "option --concurrency expects an integer, got \"x\"");
  EXPECT_EQ(args_error({"--dump-config=yes"}),
            "option --dump-config takes no value");
  EXPECT_EQ(args_error({"payments"}), "unexpected argument \"payments\"");
  // Options of the worker are not the node's.
  EXPECT_TRUE(contains(args_error({"--dsn", "x"}), "unknown option '--dsn'"));
}

TEST(NodeConfigArgs, help_is_the_nodes) {
  node_config cfg;
  try {
    apply_args(cfg, {"--concurrency", "x", "-h"});
    FAIL() << "no help_requested";
  } catch (const help_requested& e) {
    EXPECT_EQ(std::string{e.what()}, node_help());
  }
  std::string help = node_help();
  for (const char* part : {"usage: cmdbus node",
                           "--config FILE",
                           "CMDBUS_NODE_CONFIG",
                           "--domain DOMAIN",
                           "[CMDBUS_NODE_DOMAINS, comma-separated]",
                           "--concurrency N",
                           "[CMDBUS_NODE_CONCURRENCY]",
                           "--listen HOST:PORT",
                           "127.0.0.1:7400",
                           "[CMDBUS_NODE_LISTEN]",
                           "--port-file PATH",
                           "[CMDBUS_NODE_PORT_FILE]",
                           "--name NAME",
                           "[CMDBUS_NODE_NAME]",
                           "--heartbeat DURATION",
                           "[CMDBUS_NODE_HEARTBEAT]",
                           "--shutdown-timeout DURATION",
                           "[CMDBUS_NODE_SHUTDOWN_TIMEOUT]",
                           "--admin HOST:PORT",
                           "[CMDBUS_NODE_ADMIN]",
                           "--tls-certificate FILE",
                           "[CMDBUS_TLS_CERTIFICATE]",
                           "--tls-key FILE",
                           "--tls-ca-file FILE",
                           "--tls-ca-path DIR",
                           "--tls-passphrase TEXT",
                           "[CMDBUS_TLS_PASSPHRASE]",
                           "--dump-config",
                           "-h, --help",
                           "[node]",
                           "[tls]",
                           "[admin]",
                           "cleartext and unauthenticated"})
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

// -- load: precedence and validation
// ---------------------------------------------

TEST(NodeConfigLoad, file_then_env_then_cli) {
  temp_file file{"[node]\ndomains = [\"f\"]\nconcurrency = 2\n"
                 "listen = \"127.0.0.1:7001\"\nname = \"file\"\n"
                 "heartbeat = 2s\nshutdown-timeout = 2s\n"};
  fake_env env{{{"CMDBUS_NODE_CONFIG", file.path()},
                {"CMDBUS_NODE_CONCURRENCY", "3"},
                {"CMDBUS_NODE_NAME", "env"},
                {"CMDBUS_NODE_HEARTBEAT", "3s"}}};
  auto cfg = load_node({"--concurrency", "4"}, env.lookup());
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"f"})); // file
  EXPECT_EQ(cfg.listen, "127.0.0.1:7001");                 // file
  EXPECT_EQ(cfg.shutdown_timeout, 2s);                     // file
  EXPECT_EQ(cfg.name, "env");                              // env
  EXPECT_EQ(cfg.heartbeat_interval, 3s);                   // env
  EXPECT_EQ(cfg.concurrency, 4);                           // cli
  EXPECT_EQ(cfg.admin, "");                                // default
  cfg = load_node({"--domain", "c1", "--domain", "c2", "--name", "cli"},
                  env.lookup());
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"c1", "c2"}));
  EXPECT_EQ(cfg.name, "cli");
  EXPECT_EQ(cfg.concurrency, 3);
  // --config wins over CMDBUS_NODE_CONFIG.
  temp_file other{"[node]\ndomains = [\"o\"]\n"};
  cfg = load_node({"--config", other.path()}, env.lookup());
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"o"}));
  EXPECT_EQ(cfg.listen, "127.0.0.1:7400");
}

TEST(NodeConfigLoad, reports_every_problem_with_the_rule) {
  auto message = error_of([] {
    load_node({"--concurrency", "0", "--listen", "nowhere", "--heartbeat",
               "10ms", "--domain", "a", "--domain", "a"},
              fake_env{}.lookup());
  });
  EXPECT_TRUE(contains(message, "concurrency (0) must be 1..4096")) << message;
  EXPECT_TRUE(contains(message, "listen (nowhere)")) << message;
  EXPECT_TRUE(contains(message, "heartbeat (10ms) must be 100ms .. 1h"))
    << message;
  EXPECT_TRUE(contains(message, "domain 'a' is given twice")) << message;
  EXPECT_TRUE(contains(error_of([] { load_node({}, fake_env{}.lookup()); }),
                       "domains: at least one domain is required"));
  EXPECT_TRUE(contains(error_of([] {
                         load_node({"--domain", "a", "--tls-certificate", "c"},
                                   fake_env{}.lookup());
                       }),
                       "missing: tls-key, tls-ca-file or tls-ca-path"));
  temp_file bad{"[node]\nconcurency = 2\n"};
  auto file_message = error_of([&] {
    load_node({"--config", bad.path(), "--domain", "a"}, fake_env{}.lookup());
  });
  EXPECT_EQ(file_message, bad.path()
                            + ":2: unknown key 'concurency' in section [node] "
                              "(did you mean 'concurrency'?)");
  EXPECT_TRUE(contains(
    error_of([] {
      load_node({"--config", "/nonexistent/node.ini"}, fake_env{}.lookup());
    }),
    "cannot read config file '/nonexistent/node.ini'"));
}

// -- describe (--dump-config)
// ----------------------------------------------------

TEST(NodeConfigDescribe, round_trips_and_never_prints_the_passphrase) {
  node_config cfg;
  apply_ini(cfg, full_ini, "node.ini");
  cfg.dump_config = true;
  auto text = describe(cfg);
  EXPECT_FALSE(contains(text, "s3cret")) << text;
  EXPECT_TRUE(contains(text, "; passphrase: set (not shown)")) << text;
  EXPECT_FALSE(contains(text, "dump")) << text;
  node_config back;
  apply_ini(back, text, "described.ini");
  EXPECT_EQ(back.domains, cfg.domains);
  EXPECT_EQ(back.concurrency, cfg.concurrency);
  EXPECT_EQ(back.listen, cfg.listen);
  EXPECT_EQ(back.port_file, cfg.port_file);
  EXPECT_EQ(back.name, cfg.name);
  EXPECT_EQ(back.heartbeat_interval, cfg.heartbeat_interval);
  EXPECT_EQ(back.shutdown_timeout, cfg.shutdown_timeout);
  EXPECT_EQ(back.tls.certificate, cfg.tls.certificate);
  EXPECT_EQ(back.tls.ca_path, cfg.tls.ca_path);
  EXPECT_EQ(back.tls.passphrase, "");
  EXPECT_EQ(back.admin, cfg.admin);
  // The defaults round-trip too.
  node_config defaults;
  node_config read;
  apply_ini(read, describe(defaults), "defaults.ini");
  EXPECT_EQ(describe(read), describe(defaults));
}

// -- the sample configuration
// ------------------------------------------------------

TEST(NodeConfigSample, loads_is_valid_and_mentions_every_setting) {
  const std::string path = CMDBUS_SOURCE_DIR "/deploy/node.ini";
  auto sample = read_file(path);
  auto cfg = load_node({"--config", path}, fake_env{}.lookup());
  EXPECT_EQ(cfg.domains, (std::vector<std::string>{"payments"}));
  EXPECT_FALSE(cfg.tls.enabled()) << "the sample needs no certificate files";
  // describe() renders every key a file may set (with TLS and the admin
  // port set); the sample names each one, set or commented out.
  node_config full;
  apply_ini(full, full_ini, "node.ini");
  std::istringstream described{describe(full)};
  std::string line;
  while (std::getline(described, line)) {
    auto eq = line.find(" = ");
    if (eq == std::string::npos)
      continue;
    auto key = line.substr(0, eq);
    bool set = contains(sample, "\n" + key + " = ");
    bool commented = contains(sample, "\n; " + key + " = ");
    EXPECT_TRUE(set || commented) << key << " is not in deploy/node.ini";
  }
  EXPECT_TRUE(contains(sample, "passphrase")) << "the sample names it";
}

// -- the TLS environment alone (`cmdbus cluster`)
// --------------------------------

TEST(NodeConfigTls, apply_tls_env_reads_the_same_variables) {
  tls_config tls;
  tls.ca_path = "kept";
  apply_tls_env(tls, fake_env{{{"CMDBUS_TLS_CERTIFICATE", "c"},
                               {"CMDBUS_TLS_KEY", ""},
                               {"CMDBUS_TLS_CA_FILE", "ca"},
                               {"CMDBUS_TLS_PASSPHRASE", "pw"}}}
                       .lookup());
  EXPECT_EQ(tls.certificate, "c");
  EXPECT_EQ(tls.key, "");
  EXPECT_EQ(tls.ca_file, "ca");
  EXPECT_EQ(tls.ca_path, "kept");
  EXPECT_EQ(tls.passphrase, "pw");
}
