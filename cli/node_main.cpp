// The handler node program shared by `cmdbus node` and applications' own
// nodes: settings, the start, the port file, the signals, the exit codes.

#include "cmdbus/cli/node_main.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include <pthread.h>
#include <unistd.h>

#include "cmdbus/actors/node.hpp"
#include "cmdbus/cli/cli.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus {

namespace {

using namespace cli;

constexpr const char* node_help = R"(usage: PROGRAM --domain DOMAIN [--domain DOMAIN ...] [options]

Runs command handlers for workers elsewhere, without any database access: a
worker configured with this node's address (`[remote] pools`, or
--remote-pool HOST:PORT) connects, checks the protocol version, and sends it
the commands of the types this node has handlers for. Every side effect
stays on the worker. Handlers run at least once: when a node dies or its
connection drops, the worker makes its commands visible again at once and
they may run a second time elsewhere.

Options (environment variable in brackets; the command line wins):
  --domain DOMAIN        a domain to serve; repeatable [CMDBUS_NODE_DOMAINS,
                         comma-separated]
  --concurrency N        handlers running at once per domain, 1..4096; each
                         worker is offered N slots (default 16)
                         [CMDBUS_NODE_CONCURRENCY]
  --listen HOST:PORT     where to listen (default 127.0.0.1:7400; ":PORT"
                         means 127.0.0.1, port 0 a free one)
                         [CMDBUS_NODE_LISTEN]
  --port-file PATH       write the bound port there once listening (for
                         port 0) [CMDBUS_NODE_PORT_FILE]
  --name NAME            the node's name in logs and offers (default
                         HOSTNAME:PORT) [CMDBUS_NODE_NAME]
  --admin HOST:PORT      publish the admin actor for `cmdbus cluster status`
                         there (off; ":PORT" means 127.0.0.1; TLS as the
                         node's) [CMDBUS_NODE_ADMIN]
  --heartbeat DURATION   connection heartbeat, e.g. 1s; a peer silent for 3
                         times this is cut; workers must use the same
                         (default 1s) [CMDBUS_NODE_HEARTBEAT]
  --shutdown-timeout DURATION
                         how long a stop lets running handlers finish
                         (default 30s) [CMDBUS_NODE_SHUTDOWN_TIMEOUT]
  --tls-certificate PATH PEM certificate this node presents
                         [CMDBUS_TLS_CERTIFICATE]
  --tls-key PATH         its private key [CMDBUS_TLS_KEY]
  --tls-ca-file PATH     PEM file of trusted CA certificates
                         [CMDBUS_TLS_CA_FILE]
  --tls-ca-path DIR      directory of trusted CA certificates
                         [CMDBUS_TLS_CA_PATH]
                         (a key passphrase: [CMDBUS_TLS_PASSPHRASE] only)
  --json                 errors as JSON on standard output
  -h, --help             show this help

TLS: give the certificate, its key and a CA file or directory together, or
none. With TLS both sides present certificates signed by a trusted CA (any
certificate of that CA is accepted: no host name check). Without TLS the
connection is cleartext and unauthenticated: anyone who reaches the port can
run the handlers with any payload, and commands and results can be read and
altered on the way. Off loopback, use TLS or a private network.

Exit codes: 0 stopped by SIGINT/SIGTERM, 1 usage error, invalid setting or a
domain without handlers, 4 cannot listen (address in use, not local) or
cannot use the certificates.
)";

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return std::nullopt;
  return std::string{v};
}

int parse_int(const std::string& what, const std::string& text) {
  try {
    size_t used = 0;
    auto n = std::stoi(text, &used);
    if (used == text.size())
      return n;
  } catch (const std::exception&) {
  }
  throw usage_error{what + " must be an integer, not '" + text + "'"};
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(',', start);
    if (end == std::string::npos)
      end = text.size();
    auto item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty())
      items.push_back(item);
    start = end + 1;
  }
  return items;
}

struct node_options {
  node_config cfg;
  std::string port_file;
  std::chrono::milliseconds shutdown_timeout{30000};
};

node_options read_options(const args& a) {
  node_options o;
  auto& cfg = o.cfg;
  // The environment first, then the command line.
  if (auto v = env("CMDBUS_NODE_DOMAINS"))
    cfg.domains = split_list(*v);
  if (auto v = env("CMDBUS_NODE_CONCURRENCY"))
    cfg.concurrency = parse_int("CMDBUS_NODE_CONCURRENCY", *v);
  if (auto v = env("CMDBUS_NODE_LISTEN"))
    cfg.listen = *v;
  if (auto v = env("CMDBUS_NODE_PORT_FILE"))
    o.port_file = *v;
  if (auto v = env("CMDBUS_NODE_ADMIN"))
    cfg.admin = *v;
  if (auto v = env("CMDBUS_NODE_NAME"))
    cfg.name = *v;
  if (auto v = env("CMDBUS_NODE_HEARTBEAT"))
    cfg.heartbeat_interval = parse_duration("CMDBUS_NODE_HEARTBEAT", *v);
  if (auto v = env("CMDBUS_NODE_SHUTDOWN_TIMEOUT"))
    o.shutdown_timeout = parse_duration("CMDBUS_NODE_SHUTDOWN_TIMEOUT", *v);
  config::apply_tls_env(cfg.tls, [](const char* name) { return env(name); });
  if (auto ds = a.options("--domain"); !ds.empty())
    cfg.domains = ds;
  if (auto v = a.option("--concurrency"))
    cfg.concurrency = parse_int("--concurrency", *v);
  if (auto v = a.option("--listen"))
    cfg.listen = *v;
  if (auto v = a.option("--port-file"))
    o.port_file = *v;
  if (auto v = a.option("--name"))
    cfg.name = *v;
  if (auto v = a.option("--admin"))
    cfg.admin = *v;
  if (auto v = a.duration_option("--heartbeat"))
    cfg.heartbeat_interval = *v;
  if (auto v = a.duration_option("--shutdown-timeout"))
    o.shutdown_timeout = *v;
  a.apply_tls_files(cfg.tls);
  return o;
}

// Writes the port to `path` atomically (a reader never sees half a file).
void write_port_file(const std::string& path, uint16_t port) {
  auto tmp = path + ".tmp";
  {
    std::ofstream out{tmp, std::ios::trunc};
    out << port << "\n";
    if (!out)
      throw exit_with{exit_failed, "cannot write the port file " + tmp};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw exit_with{exit_failed, "cannot write the port file " + path};
}

std::string help_text(const node_program& program) {
  std::string text = node_help;
  auto at = text.find("PROGRAM");
  text.replace(at, 7, program.name);
  if (!program.description.empty()) {
    auto options = text.find("\nOptions");
    text.insert(options + 1, program.description + "\n\n");
  }
  return text;
}

} // namespace

int run_node(const std::vector<std::string>& argv,
             const node_program& program) {
  args a{argv,
         {"--help", "-h", "--json"},
         {"--domain", "--concurrency", "--listen", "--port-file", "--name",
          "--admin", "--heartbeat", "--shutdown-timeout", "--tls-certificate",
          "--tls-key", "--tls-ca-file", "--tls-ca-path"}};
  if (a.flag("--help") || a.flag("-h")) {
    std::cout << help_text(program);
    return exit_ok;
  }
  if (!a.positional().empty())
    throw usage_error{"unexpected argument '" + a.positional().front() + "'"};
  auto o = read_options(a);
  if (auto problems = validate(o.cfg); !problems.empty()) {
    std::string text;
    for (auto& p : problems)
      text += (text.empty() ? "" : "; ") + p;
    throw usage_error{text};
  }
  // The handlers, before anything starts: a domain without any is refused.
  handler_registry registry;
  auto served_by = o.cfg.name.empty() ? config::host_name() : o.cfg.name;
  if (program.register_domain)
    for (auto& d : o.cfg.domains)
      program.register_domain(d, registry, served_by);
  std::vector<std::string> empty;
  for (auto& d : o.cfg.domains) {
    auto keys = registry.keys();
    if (std::none_of(keys.begin(), keys.end(),
                     [&](const auto& k) { return k.first == d; }))
      empty.push_back("'" + d + "'");
  }
  if (!empty.empty()) {
    std::string names;
    for (auto& n : empty)
      names += (names.empty() ? "" : ", ") + n;
    throw usage_error{
      "no handlers for domain" + std::string{empty.size() > 1 ? "s " : " "}
      + names
      + (program.no_handlers_hint.empty() ? ""
                                          : "; " + program.no_handlers_hint)};
  }
  // Block SIGINT/SIGTERM in every thread (CAF's threads inherit the mask);
  // this one waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  handler_node node{o.cfg, std::move(registry)};
  uint16_t port = 0;
  try {
    port = node.start();
  } catch (const config::config_error& e) {
    throw usage_error{e.what()};
  } catch (const std::runtime_error& e) {
    throw exit_with{exit_failed, e.what()};
  }
  if (!o.port_file.empty())
    write_port_file(o.port_file, port);
  int sig = 0;
  sigwait(&sigs, &sig);
  log::info("signal {}: stopping the handler node (up to {} ms)", sig,
            o.shutdown_timeout.count());
  node.stop(o.shutdown_timeout);
  if (node.status().busy > 0) {
    // Handlers still running in application code: leave without running
    // destructors under their feet.
    std::cout.flush();
    std::_Exit(exit_ok);
  }
  return exit_ok;
}

int node_main(int argc, char** argv, const node_program& program) {
  // The node logs its start, its workers and its stop at info.
  return program_main(argc, argv, program.name, "node",
                      [&](const std::vector<std::string>& args) {
                        return run_node(args, program);
                      });
}

} // namespace cmdbus
