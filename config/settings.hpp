#pragma once

// The settings of a configuration (the worker's, a handler node's): one
// table per configuration names each setting in the config file, in the
// environment and on the command line, with its option's help and where
// its value goes. What reads the file (ini.hpp), the environment
// (environment.cpp) and the command line (args.cpp), and load(), work on
// either table; they are instantiated for the two configurations.
// Internal to cmdbus_config.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/config/api_config.hpp"
#include "cmdbus/config/common.hpp"
#include "cmdbus/config/network_config.hpp"
#include "cmdbus/config/options.hpp"
#include "cmdbus/config/values.hpp"
#include "cmdbus/model/text.hpp"

namespace cmdbus::config {

struct worker_config;
struct node_config;

} // namespace cmdbus::config

namespace cmdbus::config::detail {

// -- the table ---------------------------------------------------------------

/// How a setting's option reads the command line.
enum class form {
  /// No option: the file and the environment only.
  none,
  /// `--opt VALUE` or `--opt=VALUE`; when repeated, the last one wins
  /// (unless the setting's store accumulates, like --domain-dsn).
  value,
  /// Repeats, one list item each; together they replace the list of the
  /// file and the environment (--domain).
  each,
  /// A flag that sets the boolean setting (--tick).
  set,
  /// A flag that clears the boolean setting (--no-notify).
  clear,
};

/// One setting of a configuration `Config`.
template <class Config>
struct setting {
  /// How its value is written.
  kind type;
  /// Section in the file; "" is the top level.
  std::string_view section;
  /// Key in the file; "" for a setting of the command line only.
  std::string_view key;
  /// Environment variable, or nullptr.
  const char* env;
  /// How the command line sets it (form::none: not at all) ...
  form how;
  /// ... and its option (name, metavar, help).
  option opt;
  /// Converts a value (values.hpp) and stores it in the configuration;
  /// throws value_error. `lenient` (environment, command line) also takes
  /// 1/0 and any case for booleans.
  void (*store)(Config& cfg, const raw_value& v, bool lenient);
};

/// A key of a named section.
template <class Config>
struct named_key {
  /// "dsn".
  std::string_view key;
  /// Stores the value of NAME (`item`: ITEM of a nested section
  /// [PREFIX.NAME.NESTED.ITEM], else empty); throws value_error.
  void (*store)(Config& cfg, const std::string& name, const std::string& item,
                const raw_value& v);
};

/// Sections [PREFIX.NAME] holding keys for NAME, like the worker's
/// [domains.NAME] dsn, nested sections [PREFIX.NAME.NESTED.ITEM] holding
/// keys for an ITEM of NAME, like [domains.NAME.types.TYPE] concurrency, and
/// a section [PREFIX.NAME.FREE] whose keys are names themselves, like
/// [domains.NAME.exec] TYPE = "COMMAND".
template <class Config>
struct named_section {
  /// "domains."; empty: the configuration has none.
  std::string_view prefix;
  /// The keys a [PREFIX.NAME] section holds.
  std::vector<named_key<Config>> keys;
  /// "types"; empty: no nested sections.
  std::string_view nested;
  /// What messages call a nested section's ITEM ("TYPE").
  std::string_view item_label;
  /// The keys a nested section holds.
  std::vector<named_key<Config>> nested_keys;
  /// "exec"; empty: no section of free keys.
  std::string_view free = {};
  /// What messages call a free key ("TYPE").
  std::string_view free_label = {};
  /// Stores the value of the free key `key` of NAME; throws value_error.
  void (*free_store)(Config& cfg, const std::string& name,
                     const std::string& key, const raw_value& v)
    = nullptr;
};

/// One configuration's settings and what loading it needs besides.
template <class Config>
struct settings_table {
  /// Every setting, in the order the help lists their options.
  std::vector<setting<Config>> settings;
  /// The sections of the file besides the top level ([global]), in order.
  std::vector<std::string_view> sections;
  /// Sections of one key per name, if any.
  named_section<Config> named;
  /// --config FILE, listed first in the help.
  option config_option;
  /// The environment variable naming the config file when --config is not
  /// given.
  const char* config_env;
  /// The help text that help_requested carries.
  const char* (*help)();
  /// Environment read once the rest is known (the worker's
  /// CMDBUS_DOMAIN_DSN_<domain> of its served domains), or null;
  /// `command_line` holds what the command line alone set, which wins.
  void (*late_env)(Config& cfg, const env_lookup& getenv,
                   const Config& command_line);
};

/// The worker's table (config/worker_settings.cpp).
const settings_table<worker_config>& worker_table();

/// A handler node's table (config/node_settings.cpp).
const settings_table<node_config>& node_table();

/// The TLS settings every configuration with a `tls` member shares: [tls]
/// certificate, key, ca-file, ca-path and passphrase, CMDBUS_TLS_*,
/// --tls-*.
template <class Config>
std::vector<setting<Config>> tls_settings();

/// The worker's settings of external programs (config/exec_config.cpp):
/// --exec, [exec] timeout, kill-grace, max-output and env.
std::vector<setting<worker_config>> exec_settings();

/// Stores `TYPE = "COMMAND"` of a [domains.NAME.exec] section.
void store_exec_entry(worker_config& cfg, const std::string& domain,
                      const std::string& type, const raw_value& v);

/// Stores `exec-timeout = DUR` of a [domains.NAME.types.TYPE] section.
void store_exec_timeout_entry(worker_config& cfg, const std::string& domain,
                              const std::string& type, const raw_value& v);

/// The options of the TLS settings (--tls-certificate, ...), for a command
/// that reads them itself (`cmdbus cluster`).
std::vector<option> tls_options();

/// A configuration of the TLS settings alone (config::apply_tls_env).
struct tls_holder {
  tls_config tls;
};

/// `cmdbus api`'s settings: the defaults, then the file `file` (if any,
/// CAF-INI with [api] and [tls]), then the environment, then what
/// `command_line` says for each option (its value, or nothing when not
/// given), then validate(). Throws config_error naming the file and line,
/// the variable or the option, or with every problem, one per line.
api_program_config
load_api(const std::optional<std::string>& file, const env_lookup& getenv,
         const std::function<std::optional<std::string>(std::string_view)>&
           command_line);

/// The options of those settings (--listen ... --tls-passphrase), for
/// `cmdbus api`'s parser and help.
std::vector<option> api_options();

// -- lookups -----------------------------------------------------------------

/// Returns the setting of `key` in `section` ("" is the top level), or
/// nullptr.
template <class Config>
const setting<Config>* find_setting(const settings_table<Config>& table,
                                    std::string_view section,
                                    std::string_view key) {
  for (const auto& s : table.settings)
    if (!s.key.empty() && s.section == section && s.key == key)
      return &s;
  return nullptr;
}

/// Returns the setting of a command-line option (`--dsn`), or nullptr.
template <class Config>
const setting<Config>*
find_option(const settings_table<Config>& table, std::string_view name) {
  for (const auto& s : table.settings)
    if (s.how != form::none && s.opt.name == name)
      return &s;
  return nullptr;
}

/// Returns where an entry is, for messages: "at the top level" or
/// "in section [worker]".
std::string section_label(std::string_view section);

/// Returns a hint for an unknown key, with a leading space: the section the
/// key belongs in (" ('concurrency' belongs in section [worker])"), else the
/// closest key of the section (" (did you mean 'concurrency'?)"), else "".
template <class Config>
std::string key_hint(const settings_table<Config>& table,
                     std::string_view section, std::string_view key) {
  auto dashed = std::string{key};
  for (auto& c : dashed)
    if (c == '_')
      c = '-';
  for (const auto& s : table.settings)
    if (!s.key.empty() && s.key == dashed && s.section != section)
      return " ('" + dashed + "' belongs " + section_label(s.section) + ")";
  const setting<Config>* best = nullptr;
  size_t best_distance = 3;
  for (const auto& s : table.settings) {
    if (s.key.empty() || s.section != section)
      continue;
    auto d = edit_distance(dashed, s.key);
    if (d < best_distance) {
      best = &s;
      best_distance = d;
    }
  }
  if (best != nullptr)
    return " (did you mean '" + std::string{best->key} + "'?)";
  return {};
}

/// The entries of the help's "Options:" block: --config, the settings'
/// options, then `program_options` (the program's own flags) and -h,
/// --help. With `with_env`, each setting's environment variable follows
/// its text in brackets ("[CMDBUS_NODE_NAME]").
template <class Config>
std::vector<option_help>
options_help(const settings_table<Config>& table, bool with_env,
             const std::vector<option>& program_options = {});

// -- reading -----------------------------------------------------------------

/// What a command line says besides the settings.
struct command_line {
  /// --config FILE, if given.
  std::optional<std::string> config_file;
  /// The program's own flags that were given, in order (see load()).
  std::vector<std::string> flags;
};

/// Applies a CAF-INI text onto `cfg`; `file_name` is used in messages.
/// Throws config_error with `file:line`.
template <class Config>
void apply_ini(Config& cfg, const settings_table<Config>& table,
               std::string_view text, const std::string& file_name);

/// Applies the table's environment variables (not `late_env`). Throws
/// config_error naming the variable.
template <class Config>
void apply_env(Config& cfg, const settings_table<Config>& table,
               const env_lookup& getenv);

/// Applies command-line options onto `cfg`. `program_flags` are flags of the
/// program's own (no value) that are accepted and reported back. Throws
/// help_requested for --help / -h, and config_error for unknown options
/// (naming the nearest), positional arguments, missing or bad values.
template <class Config>
command_line apply_args(Config& cfg, const settings_table<Config>& table,
                        const std::vector<std::string>& args,
                        const std::vector<option>& program_flags = {});

/// The whole sequence: defaults, then the file (from --config, else the
/// table's config_env, else none), then the environment, then the command
/// line, then `late_env`; then validate(). The program flags given are
/// stored in `*flags_given` when not null. Throws help_requested (before
/// reading any file), or config_error for parse errors and, when invalid,
/// with all problems, one per line.
template <class Config>
Config load(const settings_table<Config>& table,
            const std::vector<std::string>& args, const env_lookup& getenv,
            const std::vector<option>& program_flags = {},
            std::vector<std::string>* flags_given = nullptr);

/// The text of the configuration file `path`; config_error when it cannot
/// be read, with the system's reason.
std::string read_config_file(const std::string& path);

} // namespace cmdbus::config::detail
