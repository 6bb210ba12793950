// A handler node's settings through its programs (`cmdbus node`, and the
// example's payments-node when it is built): a config file given by
// --config or $CMDBUS_NODE_CONFIG, the CMDBUS_NODE_* environment and the
// command line, in that order of precedence, as --dump-config prints them
// (never the key's passphrase); a node that runs from its file alone; and
// a bad file or value as exit code 1 naming the place and the help. No
// database is needed.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/db/background_cmdbus.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cmdbus::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string node_file = "[node]\n"
                              "domains = [\"from_file\"]\n"
                              "concurrency = 2\n"
                              "listen = \"127.0.0.1:7411\"\n"
                              "name = \"file-name\"\n"
                              "heartbeat = 2s\n"
                              "shutdown-timeout = 5s\n"
                              "[admin]\n"
                              "listen = \"127.0.0.1:7511\"\n";

} // namespace

TEST(NodeConfigCli, CommandLineWinsOverEnvironmentOverFile) {
  temp_dir dir;
  auto file = dir.write("node.ini", node_file);
  // The file alone.
  auto r = run_cmdbus({"node", "--demo", "--config", file, "--dump-config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "domains = [\"from_file\"]")) << r.out;
  EXPECT_TRUE(has(r.out, "concurrency = 2")) << r.out;
  EXPECT_TRUE(has(r.out, "name = \"file-name\"")) << r.out;
  EXPECT_TRUE(has(r.out, "heartbeat = 2s")) << r.out;
  EXPECT_TRUE(has(r.out, "listen = \"127.0.0.1:7511\"")) << r.out;
  // The environment over the file (named by $CMDBUS_NODE_CONFIG), the
  // command line over both.
  r = run_cmdbus({"node", "--demo", "--dump-config", "--concurrency", "4"},
                 {"CMDBUS_NODE_CONFIG=" + file, "CMDBUS_NODE_CONCURRENCY=3",
                  "CMDBUS_NODE_NAME=env-name", "CMDBUS_NODE_HEARTBEAT=3s"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "domains = [\"from_file\"]")) << r.out;
  EXPECT_TRUE(has(r.out, "listen = \"127.0.0.1:7411\"")) << r.out;
  EXPECT_TRUE(has(r.out, "shutdown-timeout = 5s")) << r.out;
  EXPECT_TRUE(has(r.out, "name = \"env-name\"")) << r.out;
  EXPECT_TRUE(has(r.out, "heartbeat = 3s")) << r.out;
  EXPECT_TRUE(has(r.out, "concurrency = 4")) << r.out;
  EXPECT_FALSE(has(r.out, "concurrency = 3")) << r.out;
  // --domain replaces the list of the file and of the environment; --config
  // wins over $CMDBUS_NODE_CONFIG.
  auto other = dir.write("other.ini", "[node]\nconcurrency = 7\n");
  r = run_cmdbus({"node", "--demo", "--dump-config", "--config", other,
                  "--domain", "a", "--domain", "b"},
                 {"CMDBUS_NODE_CONFIG=" + file, "CMDBUS_NODE_DOMAINS=x,y"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "domains = [\"a\", \"b\"]")) << r.out;
  EXPECT_TRUE(has(r.out, "concurrency = 7")) << r.out;
  EXPECT_FALSE(has(r.out, "file-name")) << r.out;
}

TEST(NodeConfigCli, DumpConfigNeverPrintsThePassphrase) {
  temp_dir dir;
  // The files must exist (validation checks that); their content is read
  // only when the node starts.
  auto cert = dir.write("n.pem", "");
  auto file = dir.write("node.ini",
                        node_file + "[tls]\n" + "certificate = \"" + cert
                          + "\"\n" + "key = \"" + dir.write("n.key", "")
                          + "\"\n" + "ca-file = \"" + dir.write("ca.pem", "")
                          + "\"\n" + "passphrase = \"file-s3cret\"\n");
  auto r = run_cmdbus({"node", "--demo", "--config", file, "--dump-config"},
                      {"CMDBUS_TLS_PASSPHRASE=env-s3cret"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has(r.out + r.err, "s3cret")) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "passphrase: set (not shown)")) << r.out;
  EXPECT_TRUE(has(r.out, "certificate = \"" + cert + "\"")) << r.out;
  // What --dump-config prints is a config file the node reads back (the
  // passphrase given again, from the environment).
  auto dumped = dir.write("dumped.ini", r.out);
  auto again = run_cmdbus({"node", "--demo", "--config", dumped,
                           "--dump-config"},
                          {"CMDBUS_TLS_PASSPHRASE=env-s3cret"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);
}

TEST(NodeConfigCli, BadFileOrValueIsAUsageErrorNamingWhere) {
  temp_dir dir;
  auto typo = dir.write("typo.ini",
                        "[node]\ndomains = [\"p\"]\nlistn = \":0\"\n");
  auto r = run_cmdbus({"node", "--demo", "--config", typo});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, typo
                           + ":3: unknown key 'listn' in section [node] "
                             "(did you mean 'listen'?)"))
    << r.err;
  EXPECT_TRUE(has(r.err, "(see `cmdbus node --help`)")) << r.err;
  auto worker_file = dir.write("worker.ini", "[worker]\nconcurrency = 2\n");
  r = run_cmdbus({"node", "--demo", "--config", worker_file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "unknown section [worker]")) << r.err;
  r = run_cmdbus({"node", "--demo", "--domain", "p"},
                 {"CMDBUS_NODE_CONCURRENCY=many"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "environment variable CMDBUS_NODE_CONCURRENCY"))
    << r.err;
  r = run_cmdbus({"node", "--demo", "--config", dir.file("missing.ini")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "cannot read config file")) << r.err;
  r = run_cmdbus(
    {"node", "--demo", "--config", dir.file("missing.ini"), "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.out, R"("exit_code":1)")) << r.out;
  EXPECT_FALSE(crashed(r));
}

TEST(NodeConfigCli, RunsFromItsConfigFileAlone) {
  temp_dir dir;
  auto port_file = dir.file("port");
  auto file = dir.write("node.ini", "[node]\n"
                                    "domains = [\"payments\"]\n"
                                    "listen = \"127.0.0.1:0\"\n"
                                    "name = \"from-file\"\n"
                                    "port-file = \""
                                      + port_file + "\"\n");
  background_cmdbus node{{"node", "--demo"},
                         {"CMDBUS_NODE_CONFIG=" + file, "PGHOST=/nonexistent",
                          "PGPORT=1"}};
  int port = 0;
  eventually(
    [&] {
      std::ifstream in{port_file};
      return static_cast<bool>(in >> port) && port > 0;
    },
    20s);
  ASSERT_GT(port, 0) << "no port file";
  auto r = node.stop(20s);
  ASSERT_TRUE(r) << "the node did not stop";
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_TRUE(has(r->err, "handler node 'from-file' listening on 127.0.0.1:"
                            + std::to_string(port)))
    << r->err;
}

#ifdef PAYMENTS_NODE_BINARY
TEST(NodeConfigCli, ANodeProgramOfOnesOwnReadsTheSameSettings) {
  temp_dir dir;
  auto file = dir.write("node.ini", node_file);
  auto r = run_process({PAYMENTS_NODE_BINARY, "--config", file, "--dump-config",
                        "--name", "cli-name"},
                       {"CMDBUS_NODE_CONCURRENCY=3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "domains = [\"from_file\"]")) << r.out;
  EXPECT_TRUE(has(r.out, "concurrency = 3")) << r.out;
  EXPECT_TRUE(has(r.out, "name = \"cli-name\"")) << r.out;
  auto help = run_process({PAYMENTS_NODE_BINARY, "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_TRUE(has(help.out, "usage: payments-node")) << help.out;
  EXPECT_TRUE(has(help.out, "--config FILE")) << help.out;
  EXPECT_TRUE(has(help.out, "--dump-config")) << help.out;
}
#endif
