// load(): the whole sequence of reading a worker's configuration, from the
// defaults through the file, the environment and the command line to
// validate(). The parts live in their own files: settings.cpp (the table),
// values.cpp (conversion), ini.cpp (the file), environment.cpp, args.cpp,
// validate.cpp, help.cpp and describe.cpp.

#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/config/values.hpp"

#include <algorithm>
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

const std::string& dsn_for(const worker_config& cfg,
                           const std::string& domain) {
  auto i = cfg.domain_dsn.find(domain);
  return i == cfg.domain_dsn.end() ? cfg.dsn : i->second;
}

std::vector<dsn_group> group_by_dsn(const worker_config& cfg,
                                    const std::vector<std::string>& domains) {
  std::vector<dsn_group> out;
  for (const auto& d : domains) {
    const auto& dsn = dsn_for(cfg, d);
    auto i = std::find_if(out.begin(), out.end(),
                          [&](const dsn_group& g) { return g.dsn == dsn; });
    if (i == out.end())
      out.push_back({dsn, {d}});
    else
      i->domains.push_back(d);
  }
  return out;
}

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
  detail::apply_settings_env(cfg, getenv);
  apply_args(cfg, args);
  // The domains' own DSN variables once the served domains are known; the
  // command line's --domain-dsn (in `scratch`) wins.
  detail::apply_domain_dsn_env(cfg, getenv, scratch.domain_dsn);
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
