#include "cmdbus/cli/program.hpp"

#include <algorithm>
#include <iostream>
#include <stdexcept>
#include <string_view>

#include <unistd.h>

#include "cmdbus/cli/failure.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/model/version.hpp"

namespace cmdbus::cli {

namespace {

// Removes every `OPTION VALUE` or `OPTION=VALUE` before any `--` from `argv`
// and returns the last VALUE; `choices` completes the message for a missing
// value.
std::optional<std::string> take_global_value(std::vector<std::string>& argv,
                                             std::string_view option,
                                             std::string_view choices) {
  std::optional<std::string> given;
  for (size_t i = 0; i < argv.size() && argv[i] != "--";) {
    std::string_view arg = argv[i];
    auto at = argv.begin() + static_cast<std::ptrdiff_t>(i);
    if (arg == option) {
      if (i + 1 >= argv.size())
        throw usage_error{std::string{option} + " needs a value ("
                          + std::string{choices} + ")"};
      given = argv[i + 1];
      argv.erase(at, at + 2);
    } else if (arg.size() > option.size()
               && arg.substr(0, option.size()) == option
               && arg[option.size()] == '=') {
      given = std::string{arg.substr(option.size() + 1)};
      argv.erase(at);
    } else {
      ++i;
    }
  }
  return given;
}

// Whether `argv` asks for JSON output (--json before any `--`).
bool wants_json(const std::vector<std::string>& argv) {
  for (const auto& a : argv) {
    if (a == "--")
      return false;
    if (a == "--json")
      return true;
  }
  return false;
}

} // namespace

void program_context::start_logging(const std::string& command) const {
  // The servers log their start (where they listen) and stop at info.
  auto level = command == "worker" || command == "node" || command == "api"
                 ? spdlog::level::info
                 : spdlog::level::warn;
  try {
    level = log::level_from_env(level);
  } catch (const std::invalid_argument& e) {
    throw usage_error{std::string{"CMDBUS_LOG_LEVEL: "} + e.what()};
  }
  if (level_) {
    try {
      level = log::parse_level(*level_);
    } catch (const std::invalid_argument& e) {
      throw usage_error{std::string{"--log-level: "} + e.what()};
    }
  }
  log::set_level(level);
  auto format = log::format::text;
  try {
    format = log::format_from_env();
  } catch (const std::invalid_argument& e) {
    throw usage_error{std::string{"CMDBUS_LOG_FORMAT: "} + e.what()};
  }
  if (format_) {
    try {
      format = log::parse_format(*format_);
    } catch (const std::invalid_argument& e) {
      throw usage_error{std::string{"--log-format: "} + e.what()};
    }
  }
  log::set_format(format);
}

int program_main(int argc, char** argv, const std::string& program,
                 const std::function<int(program_context&)>& run) {
  program_context ctx;
  ctx.args.assign(argv + 1, argv + argc);
  ctx.help_of = program;
  bool json = wants_json(ctx.args);
  try {
    ctx.level_ = take_global_value(
      ctx.args, log_level_option.name,
      "trace, debug, info, warn, error, critical or off");
    ctx.format_ = take_global_value(ctx.args, log_format_option.name,
                                    "text, json or journal");
    return run(ctx);
  } catch (...) {
    auto f = describe_failure(std::current_exception());
    if (f.code == exit_usage && f.message.find("--help`") == std::string::npos)
      f.message += " (see `" + ctx.help_of + " --help`)";
    return report_failure(f, program, json);
  }
}

int program_main(
  int argc, char** argv, const std::string& program, const std::string& command,
  const std::function<int(const std::vector<std::string>&)>& run) {
  return program_main(argc, argv, program, [&](program_context& ctx) {
    ctx.start_logging(command);
    auto end = std::find(ctx.args.begin(), ctx.args.end(), "--");
    if (std::find(ctx.args.begin(), end, "--version") != end) {
      std::cout << program << " (cmdbus " << version() << ")\n";
      return exit_ok;
    }
    return run(ctx.args);
  });
}

bool stdout_is_terminal() {
  return isatty(STDOUT_FILENO) == 1;
}

} // namespace cmdbus::cli
