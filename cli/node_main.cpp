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
#include "cmdbus/cli/failure.hpp"
#include "cmdbus/cli/program.hpp"
#include "cmdbus/config/help.hpp"
#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/settings.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus {

namespace {

using namespace cli;

constexpr config::option json_option{"--json", "",
                                     "errors as JSON on standard output"};

constexpr const char* node_exit_codes = R"(
Exit codes: 0 stopped by SIGINT/SIGTERM, 1 usage error, invalid setting or a
domain without handlers, 4 cannot listen (address in use, not local) or
cannot use the certificates.
)";

// The flags a node program accepts besides its settings: --json and the
// program's own.
std::vector<config::option> flags_of(const node_program& program) {
  std::vector<config::option> flags{json_option};
  for (const auto& f : program.flags)
    flags.push_back({f.name, "", f.help});
  return flags;
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

// The help text: the settings' help under the program's name, what the
// program serves, the options of the command line only, the exit codes.
std::string help_text(const node_program& program) {
  auto options = flags_of(program);
  options.push_back(log_level_option);
  options.push_back(log_format_option);
  return config::detail::node_help(
    {program.name, program.description, options, node_exit_codes});
}

} // namespace

int run_node(const std::vector<std::string>& argv,
             const node_program& program) {
  config::node_config cfg;
  try {
    cfg = config::detail::load(
      config::detail::node_table(), argv,
      [](const char* name) -> std::optional<std::string> {
        if (const char* v = std::getenv(name))
          return std::string{v};
        return std::nullopt;
      },
      flags_of(program));
  } catch (const config::help_requested&) {
    std::cout << help_text(program);
    return exit_ok;
  } catch (const config::config_error& e) {
    // One line: the problems joined.
    std::string text = e.what();
    for (size_t at = text.find('\n'); at != std::string::npos;
         at = text.find('\n', at))
      text.replace(at, 1, "; ");
    throw usage_error{text};
  }
  if (cfg.dump_config) {
    std::cout << config::describe(cfg);
    return exit_ok;
  }
  // The handlers, before anything starts: a domain without any is refused.
  handler_registry registry;
  auto served_by = cfg.name.empty() ? config::host_name() : cfg.name;
  if (program.register_domain)
    for (auto& d : cfg.domains)
      program.register_domain(d, registry, served_by);
  std::vector<std::string> empty;
  for (auto& d : cfg.domains) {
    auto keys = registry.keys();
    if (std::none_of(keys.begin(), keys.end(),
                     [&](const auto& k) { return k.first == d; }))
      empty.push_back("'" + d + "'");
  }
  if (!empty.empty()) {
    std::string names;
    for (auto& n : empty)
      names += (names.empty() ? "" : ", ") + n;
    throw usage_error{"no handlers for domain"
                      + std::string{empty.size() > 1 ? "s " : " "} + names
                      + (program.no_handlers_hint.empty()
                           ? ""
                           : "; " + program.no_handlers_hint)};
  }
  // Block SIGINT/SIGTERM in every thread (CAF's threads inherit the mask);
  // this one waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  handler_node node{cfg, std::move(registry)};
  uint16_t port = 0;
  try {
    port = node.start();
  } catch (const config::config_error& e) {
    throw usage_error{e.what()};
  } catch (const std::runtime_error& e) {
    throw exit_with{exit_failed, e.what()};
  }
  if (!cfg.port_file.empty())
    write_port_file(cfg.port_file, port);
  int sig = 0;
  sigwait(&sigs, &sig);
  log::info("signal {}: stopping the handler node (up to {} ms)", sig,
            cfg.shutdown_timeout.count());
  node.stop(cfg.shutdown_timeout);
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
