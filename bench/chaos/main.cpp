// cmdbus-chaos: the fault harness of the worker (see --help and
// scripts/chaos). Runs each requested scenario, prints its table, and exits
// non-zero when any pass criterion failed.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "bench/chaos/options.hpp"
#include "bench/chaos/process.hpp"
#include "bench/chaos/report.hpp"
#include "bench/chaos/scenario.hpp"
#include "bench/chaos/sender.hpp"

using namespace cmdbus;
using namespace cmdbus::chaos;

namespace {

constexpr int exit_passed = 0;
constexpr int exit_failed = 1;
constexpr int exit_broken = 2;
constexpr int exit_interrupted = 130;

std::string make_log_dir(const options& o) {
  if (!o.log_dir.empty()) {
    std::filesystem::create_directories(o.log_dir);
    return o.log_dir;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string{tmp && *tmp ? tmp : "/tmp"}
                        + "/cmdbus-chaos-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr)
    throw std::runtime_error("cannot create a folder for the logs in "
                             + pattern);
  return buf.data();
}

void print_log_tails(std::FILE* out, const scenario_report& r) {
  for (auto& path : r.logs) {
    auto tail = tail_of(path, 15);
    std::fprintf(out, "  ---- last lines of %s\n%s", path.c_str(),
                 tail.empty() ? "  (empty)\n" : tail.c_str());
  }
}

} // namespace

int main(int argc, char** argv) {
  options o;
  try {
    o = parse_options(argc, argv);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "cmdbus-chaos: %s (see --help)\n", e.what());
    return exit_broken;
  }
  if (o.help) {
    std::fputs(help_text(), stdout);
    return exit_passed;
  }
  install_signal_handlers();
  // The sender's pool warns on every failed reconnect; the table counts
  // them.
  spdlog::set_level(spdlog::level::err);
  // With --json, stdout carries the JSON document only.
  std::FILE* out = o.json ? stderr : stdout;
  std::string log_dir;
  try {
    log_dir = make_log_dir(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmdbus-chaos: %s\n", e.what());
    return exit_broken;
  }
  std::fprintf(out,
               "cmdbus-chaos: %d commands per scenario over %d s, %d "
               "workers; logs in %s\n",
               o.commands, o.load_seconds(), o.workers, log_dir.c_str());
  std::fflush(out);

  std::vector<scenario_report> reports;
  std::vector<std::string> broken;
  bool was_interrupted = false;
  bool told_abandoned = false;
  for (auto& name : o.scenarios) {
    try {
      auto r = run_scenario(name, o, log_dir);
      print_table(out, r);
      if (!r.failures().empty())
        print_log_tails(out, r);
      if (sender::any_abandoned() && !told_abandoned
          && &name != &o.scenarios.back()) {
        told_abandoned = true;
        std::fprintf(out, "  note: the sending threads stuck in a send "
                          "keep running until the harness exits; they "
                          "may take CPU from the scenarios that follow\n");
      }
      reports.push_back(std::move(r));
    } catch (const interrupted_error&) {
      was_interrupted = true;
      std::fprintf(out, "== scenario %s: interrupted\n", name.c_str());
      break;
    } catch (const std::exception& e) {
      broken.push_back(name);
      std::fprintf(out, "== scenario %s: the harness could not run it: %s\n",
                   name.c_str(), e.what());
    }
  }

  std::vector<std::string> failed;
  for (auto& r : reports)
    if (!r.failures().empty())
      failed.push_back(r.scenario);
  if (o.json)
    std::fputs(to_json(reports).c_str(), stdout);
  std::string summary;
  for (auto& r : reports)
    summary += " " + r.scenario + "="
               + (r.failures().empty() ? "pass" : "FAIL");
  for (auto& b : broken)
    summary += " " + b + "=not-run";
  std::fprintf(out, "== chaos summary:%s\n", summary.c_str());
  bool keep = o.keep_logs || !failed.empty() || !broken.empty()
              || was_interrupted;
  if (keep) {
    std::fprintf(out, "   logs kept in %s\n", log_dir.c_str());
  } else if (o.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(log_dir, ec);
  }
  int code = exit_passed;
  if (was_interrupted) {
    code = exit_interrupted;
  } else if (!broken.empty()) {
    code = exit_broken;
  } else if (!failed.empty()) {
    std::string names;
    for (auto& f : failed)
      names += " " + f;
    std::fprintf(out, "   FAILED scenarios:%s\n", names.c_str());
    code = exit_failed;
  }
  if (sender::any_abandoned()) {
    // Threads stuck in a send still run; leave without destructors under
    // their feet (every child process is stopped already).
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
  }
  return code;
}
