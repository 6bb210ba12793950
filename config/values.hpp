#pragma once

// Values of the worker's settings: as written (a raw_value from the file, the
// environment or the command line), converted into a worker_config, and
// written back as text for messages and describe(). Internal to
// cmdbus_config.

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config::detail {

// -- raw values --------------------------------------------------------------

/// A value as written, before conversion to the setting's type.
struct raw_value {
  enum class form { bare, quoted, list };
  form shape = form::bare;
  /// The text of a bare or quoted value.
  std::string text;
  /// The items of a list.
  std::vector<raw_value> items;
};

/// A bare (unquoted) value.
inline raw_value bare(std::string text) {
  return {raw_value::form::bare, std::move(text), {}};
}

/// A quoted string.
inline raw_value quoted(std::string text) {
  return {raw_value::form::quoted, std::move(text), {}};
}

/// A value that does not fit its setting; the message is completed with the
/// place (file:line, variable or option) by the caller.
class value_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// -- conversion --------------------------------------------------------------

/// Converts `v` and stores it in `cfg`; `lenient` (environment and command
/// line) also accepts 1/0 and any case for booleans. Throws value_error.
void assign(worker_config& cfg, const setting& s, const raw_value& v,
            bool lenient);

/// Turns an environment or command-line text into a raw value: lists are
/// comma-separated (an empty text is an empty list), strings are taken as is.
/// Throws value_error for an empty list entry.
raw_value from_text(const setting& s, std::string_view text);

// -- per-domain DSNs ---------------------------------------------------------

/// The prefix of a domain's DSN variable: CMDBUS_DOMAIN_DSN_<domain>.
inline constexpr const char* domain_dsn_env_prefix = "CMDBUS_DOMAIN_DSN_";

/// Applies the CMDBUS_DOMAIN_DSN_<domain> variables of the served domains
/// (cfg.domains), except those of the domains in `keep` (set on the command
/// line, which wins).
void apply_domain_dsn_env(worker_config& cfg, const env_lookup& getenv,
                          const std::map<std::string, std::string>& keep);

/// Applies the other CMDBUS_* variables (the settings table's).
void apply_settings_env(worker_config& cfg, const env_lookup& getenv);

/// Stores `--domain-dsn NAME=DSN`'s value. Throws value_error.
void assign_domain_dsn(worker_config& cfg, std::string_view value);

/// Stores `dsn = "..."` of a [domains.NAME] section. Throws value_error.
void assign_domain_dsn(worker_config& cfg, const std::string& domain,
                       const raw_value& v);

/// The prefix of a domain's section in the file: [domains.NAME].
inline constexpr std::string_view domain_section_prefix = "domains.";

/// Returns `text` without leading and trailing blanks and line breaks.
std::string_view trim(std::string_view text);

// -- text --------------------------------------------------------------------

/// Returns `x` in milliseconds: "250ms".
std::string ms_text(std::chrono::milliseconds x);

/// Returns `x` in seconds: "30s".
std::string s_text(std::chrono::seconds x);

/// Returns `x` in the shortest exact unit: 1h, 2min, 30s or 250ms.
std::string duration_text(std::chrono::milliseconds x);

/// Returns the shortest text that reads back as `x`.
std::string real_text(double x);

/// Quotes `text` as a CAF-INI string.
std::string ini_string(std::string_view text);

} // namespace cmdbus::config::detail
