// The command line of a worker or a handler node: `--opt value` or
// `--opt=value` for each setting that has an option (see the tables,
// config/worker_settings.cpp and config/node_settings.cpp), the flags among
// them (--no-notify, --tick, --dump-config), --config FILE, and the
// options that repeat (--domain, --remote-pool: together they replace the
// list of the file and the environment; --domain-dsn NAME=DSN: one domain
// each). When any other option repeats, the last one wins.
//
// The other `cmdbus` commands parse their arguments with the tool's own
// parser (apps/args.hpp), over option tables of the same kind. The two stay
// apart because they read different command lines: the tool's collects
// positional arguments and options for the command to interpret, while
// these options are settings, converted and checked as they are read, and
// a worker or a node takes no positional argument at all (one is most
// likely a DSN missing its --dsn, so it is shown masked).

#include <map>

#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/settings.hpp"
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

/// Returns an option's name as a message shows it: in single quotes, or
/// escaped when it holds anything but printable ASCII.
std::string quoted_name(const std::string& name) {
  for (unsigned char c : name)
    if (c < 0x20 || c > 0x7e)
      return db::printable(name);
  return "'" + name + "'";
}

} // namespace

namespace detail {

template <class Config>
command_line apply_args(Config& cfg, const settings_table<Config>& table,
                        const std::vector<std::string>& args,
                        const std::vector<option>& program_flags) {
  for (const auto& arg : args)
    if (arg == help_option.name || arg == help_option.short_name)
      throw help_requested{table.help()};
  auto is_program_flag = [&](const std::string& name) {
    for (const auto& f : program_flags)
      if (f.name == name)
        return true;
    return false;
  };
  command_line out;
  // The items of the options that repeat, by setting, in order.
  std::map<const setting<Config>*, raw_value> lists;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
      throw config_error("unexpected argument " + db::printable(shown(arg)));
    auto eq = arg.find('=');
    auto name = arg.substr(0, eq);
    std::optional<std::string> value;
    if (eq != std::string::npos)
      value = arg.substr(eq + 1);
    const auto* s = find_option(table, name);
    bool flag = is_program_flag(name)
                || (s != nullptr
                    && (s->how == form::set || s->how == form::clear));
    if (s == nullptr && !flag && name != table.config_option.name) {
      // The name only: a mistyped --dsn=... may carry a password.
      std::vector<std::string> known{std::string{table.config_option.name}};
      for (const auto& x : table.settings)
        if (x.how != form::none)
          known.emplace_back(x.opt.name);
      for (const auto& f : program_flags)
        known.emplace_back(f.name);
      known.emplace_back(help_option.name);
      throw config_error("unknown option " + quoted_name(name)
                         + did_you_mean(name, known));
    }
    if (flag) {
      if (value)
        throw config_error("option " + name + " takes no value");
      if (s == nullptr)
        out.flags.push_back(name);
      else
        s->store(cfg, bare(s->how == form::set ? "true" : "false"), false);
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size())
        throw config_error("option " + name + " needs a value");
      value = args[++i];
    }
    if (s == nullptr) {
      if (value->empty())
        throw config_error("option " + name + " needs a file name");
      out.config_file = *value;
      continue;
    }
    if (s->how == form::each) {
      auto& list = lists[s];
      list.shape = raw_value::form::list;
      list.items.push_back(s->type == kind::string_list ? quoted(*value)
                                                        : bare(*value));
      continue;
    }
    try {
      s->store(cfg, from_text(s->type, *value), true);
    } catch (const value_error& e) {
      throw config_error("option " + name + " " + e.what());
    }
  }
  for (const auto& [s, list] : lists) {
    try {
      s->store(cfg, list, true);
    } catch (const value_error& e) {
      throw config_error("option " + std::string{s->opt.name} + " " + e.what());
    }
  }
  return out;
}

template command_line
apply_args(worker_config&, const settings_table<worker_config>&,
           const std::vector<std::string>&, const std::vector<option>&);
template command_line
apply_args(node_config&, const settings_table<node_config>&,
           const std::vector<std::string>&, const std::vector<option>&);

} // namespace detail

std::optional<std::string> apply_args(worker_config& cfg,
                                      const std::vector<std::string>& args) {
  return detail::apply_args(cfg, detail::worker_table(), args).config_file;
}

std::optional<std::string> apply_args(node_config& cfg,
                                      const std::vector<std::string>& args) {
  return detail::apply_args(cfg, detail::node_table(), args).config_file;
}

} // namespace cmdbus::config
