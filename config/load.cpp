// load(): the whole sequence of reading a configuration (a worker's or a
// handler node's), from the defaults through the file, the environment and
// the command line to validate(). The parts live in their own files: the
// tables (worker_settings.cpp, node_settings.cpp), values.cpp
// (conversion), ini.cpp (the file), environment.cpp, args.cpp, validate.cpp
// and node_config.cpp (the rules), help.cpp and describe.cpp.

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config {

namespace detail {

std::string read_config_file(const std::string& path) {
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

template <class Config>
Config load(const settings_table<Config>& table,
            const std::vector<std::string>& args, const env_lookup& getenv,
            const std::vector<option>& program_flags,
            std::vector<std::string>* flags_given) {
  // A first pass finds --config and reports command-line errors (and --help)
  // before any file is read; what it sets alone is the command line's.
  Config command_line_only;
  auto given = apply_args(command_line_only, table, args, program_flags);
  auto config_file = given.config_file;
  if (!config_file) {
    auto from_env = getenv(table.config_env);
    if (from_env && !from_env->empty())
      config_file = *from_env;
  }
  Config cfg;
  if (config_file)
    apply_ini(cfg, table, read_config_file(*config_file), *config_file);
  apply_env(cfg, table, getenv);
  apply_args(cfg, table, args, program_flags);
  if (table.late_env != nullptr)
    table.late_env(cfg, getenv, command_line_only);
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
  if (flags_given != nullptr)
    *flags_given = std::move(given.flags);
  return cfg;
}

template worker_config
load(const settings_table<worker_config>&, const std::vector<std::string>&,
     const env_lookup&, const std::vector<option>&, std::vector<std::string>*);
template node_config
load(const settings_table<node_config>&, const std::vector<std::string>&,
     const env_lookup&, const std::vector<option>&, std::vector<std::string>*);

} // namespace detail

worker_config load(const std::vector<std::string>& args,
                   const env_lookup& getenv) {
  return detail::load(detail::worker_table(), args, getenv);
}

node_config load_node(const std::vector<std::string>& args,
                      const env_lookup& getenv) {
  return detail::load(detail::node_table(), args, getenv);
}

} // namespace cmdbus::config
