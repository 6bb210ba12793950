// The command line of `cmdbus worker`: `--opt value` or `--opt=value` for
// each setting that has an option (see config/settings.hpp), the flags
// --no-notify, --tick and --dump-config, --config FILE, and --domain D and
// --remote-pool HOST:PORT, which repeat and replace the domains (the remote
// pools) of the file and the environment, and --domain-dsn NAME=DSN, which
// repeats (one domain each).
// When an option repeats, the last one wins.
//
// The other `cmdbus` commands parse their arguments with cli::args
// (apps/cli.hpp). The two stay apart because they read different command
// lines: cli::args collects positional arguments and a per-command list of
// flags and options for the command to interpret, while the worker's
// options are the settings table's, converted and checked as they are read,
// and a worker takes no positional argument at all (one is most likely a
// DSN missing its --dsn, so it is shown masked).

#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/values.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/dsn.hpp"
#include "cmdbus/db/queue_name.hpp"

namespace cmdbus::config {

namespace {

/// Returns an unexpected argument as it may be shown: masked when it may be
/// a DSN (it has a `=` or a `://`), since that may hold a password.
std::string shown(const std::string& arg) {
  if (arg.find('=') == std::string::npos
      && arg.find("://") == std::string::npos)
    return arg;
  return db::mask_dsn(arg);
}

} // namespace

std::optional<std::string> apply_args(worker_config& cfg,
                                      const std::vector<std::string>& args) {
  for (const auto& arg : args)
    if (arg == "--help" || arg == "-h")
      throw help_requested{};
  using namespace detail;
  std::optional<std::string> config_file;
  bool domains_given = false;
  bool pools_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
      throw config_error("unexpected argument " + db::printable(shown(arg)));
    auto eq = arg.find('=');
    auto name = arg.substr(0, eq);
    std::optional<std::string> value;
    if (eq != std::string::npos)
      value = arg.substr(eq + 1);
    if (name == "--no-notify" || name == "--tick" || name == "--dump-config") {
      if (value)
        throw config_error("option " + name + " takes no value");
      if (name == "--no-notify")
        cfg.use_notify = false;
      else if (name == "--tick")
        cfg.tick = true;
      else
        cfg.dump_config = true;
      continue;
    }
    const auto* s = find_option(name);
    if (s == nullptr && name != "--config" && name != "--domain"
        && name != "--remote-pool" && name != "--domain-dsn")
      throw config_error("unknown option " + db::printable(name));
    if (!value) {
      if (i + 1 >= args.size())
        throw config_error("option " + name + " needs a value");
      value = args[++i];
    }
    if (name == "--config") {
      if (value->empty())
        throw config_error("option --config needs a file name");
      config_file = *value;
    } else if (name == "--domain") {
      if (!domains_given)
        cfg.domains.clear();
      domains_given = true;
      cfg.domains.push_back(*value);
    } else if (name == "--remote-pool") {
      if (!pools_given)
        cfg.remote.pools.clear();
      pools_given = true;
      cfg.remote.pools.push_back(*value);
    } else if (name == "--domain-dsn") {
      try {
        assign_domain_dsn(cfg, *value);
      } catch (const value_error& e) {
        throw config_error("option --domain-dsn " + std::string{e.what()});
      }
    } else {
      try {
        assign(cfg, *s, from_text(*s, *value), true);
      } catch (const value_error& e) {
        throw config_error("option " + name + " " + e.what());
      }
    }
  }
  return config_file;
}

} // namespace cmdbus::config
