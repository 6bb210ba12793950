// load(): the whole sequence of reading a worker's configuration, from the
// defaults through the file, the environment and the command line to
// validate(). The parts live in their own files: settings.cpp (the table),
// values.cpp (conversion), ini.cpp (the file), environment.cpp, args.cpp,
// validate.cpp, help.cpp and describe.cpp.

#include "cmdbus/config/worker_config.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cmdbus::config {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw config_error("cannot read config file '" + path
                       + "': " + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad())
    throw config_error("cannot read config file '" + path + "'");
  return buf.str();
}

} // namespace

worker_config load(const std::vector<std::string>& args,
                   const env_lookup& getenv) {
  // A first pass finds --config and reports command-line errors (and --help)
  // before any file is read.
  worker_config scratch;
  auto config_file = apply_args(scratch, args);
  if (!config_file) {
    auto from_env = getenv("CMDBUS_CONFIG");
    if (from_env && !from_env->empty())
      config_file = *from_env;
  }
  worker_config cfg;
  if (config_file)
    apply_ini(cfg, read_file(*config_file), *config_file);
  apply_env(cfg, getenv);
  apply_args(cfg, args);
  auto problems = validate(cfg);
  if (!problems.empty()) {
    std::string text;
    for (const auto& problem : problems) {
      if (!text.empty())
        text += '\n';
      text += problem;
    }
    throw config_error(text);
  }
  return cfg;
}

} // namespace cmdbus::config
