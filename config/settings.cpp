// What the two settings tables share: the TLS rows, the help's option
// entries and the section names in messages.

#include "cmdbus/config/settings.hpp"

#include "cmdbus/config/api_config.hpp"
#include "cmdbus/config/node_config.hpp"
#include "cmdbus/config/worker_config.hpp"

namespace cmdbus::config::detail {

std::string section_label(std::string_view section) {
  return section.empty() ? std::string{"at the top level"}
                         : "in section [" + std::string{section} + "]";
}

template <class Config>
std::vector<setting<Config>> tls_settings() {
  return {
    {kind::string,
     "tls",
     "certificate",
     "CMDBUS_TLS_CERTIFICATE",
     form::value,
     {"--tls-certificate", "FILE",
      "PEM certificate (chain) this process presents to its peers; TLS needs "
      "it, its key and a CA file or directory together, or none of them "
      "(TLS off)"},
     [](Config& c, const raw_value& v, bool) {
       c.tls.certificate = as_string(v);
     }},
    {kind::string,
     "tls",
     "key",
     "CMDBUS_TLS_KEY",
     form::value,
     {"--tls-key", "FILE", "the certificate's private key (PEM)"},
     [](Config& c, const raw_value& v, bool) { c.tls.key = as_string(v); }},
    {kind::string,
     "tls",
     "ca-file",
     "CMDBUS_TLS_CA_FILE",
     form::value,
     {"--tls-ca-file", "FILE",
      "PEM file of the CA certificates that signed the peers' certificates"},
     [](Config& c, const raw_value& v, bool) { c.tls.ca_file = as_string(v); }},
    {kind::string,
     "tls",
     "ca-path",
     "CMDBUS_TLS_CA_PATH",
     form::value,
     {"--tls-ca-path", "DIR", "directory of such CA certificates"},
     [](Config& c, const raw_value& v, bool) { c.tls.ca_path = as_string(v); }},
    {kind::string,
     "tls",
     "passphrase",
     "CMDBUS_TLS_PASSPHRASE",
     form::value,
     {"--tls-passphrase", "TEXT",
      "passphrase of an encrypted key (never printed; prefer "
      "$CMDBUS_TLS_PASSPHRASE)"},
     [](Config& c, const raw_value& v, bool) {
       c.tls.passphrase = as_string(v);
     }},
  };
}

std::vector<option> tls_options() {
  std::vector<option> out;
  for (const auto& s : tls_settings<tls_holder>())
    out.push_back(s.opt);
  return out;
}

template <class Config>
std::vector<option_help>
options_help(const settings_table<Config>& table, bool with_env,
             const std::vector<option>& program_options) {
  std::vector<option_help> out;
  out.push_back(
    {table.config_option.label(), std::string{table.config_option.help}});
  for (const auto& s : table.settings) {
    if (s.how == form::none)
      continue;
    auto text = std::string{s.opt.help};
    if (with_env && s.env != nullptr) {
      text += std::string{" ["} + s.env;
      if (s.type == kind::string_list || s.type == kind::integer_list)
        text += ", comma-separated";
      text += "]";
    }
    out.push_back({s.opt.label(), std::move(text)});
  }
  for (const auto& o : program_options)
    out.push_back({o.label(), std::string{o.help}});
  out.push_back({help_option.label(), std::string{help_option.help}});
  return out;
}

template std::vector<setting<worker_config>> tls_settings();
template std::vector<setting<node_config>> tls_settings();
template std::vector<setting<tls_holder>> tls_settings();
template std::vector<setting<api_program_config>> tls_settings();
template std::vector<option_help>
options_help(const settings_table<worker_config>&, bool,
             const std::vector<option>&);
template std::vector<option_help>
options_help(const settings_table<node_config>&, bool,
             const std::vector<option>&);

} // namespace cmdbus::config::detail
