// `cmdbus api`'s settings table (see config/api_config.hpp), how they are
// loaded, and the rules of the API's listener that a worker's [api]
// section shares.

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cmdbus/config/api_config.hpp"
#include "cmdbus/config/settings.hpp"

namespace cmdbus::config {

namespace detail {

namespace {

settings_table<api_program_config> make_api_table() {
  using c = api_program_config;
  using v = raw_value;
  std::vector<setting<c>> rows{
    {kind::string,
     "api",
     "listen",
     "CMDBUS_API_LISTEN",
     form::value,
     {"--listen", "ADDR:PORT",
      "where to listen (default 127.0.0.1:8780; port 0 picks a free one, "
      "logged at the start)"},
     [](c& x, const v& y, bool) { x.api.listen = as_string(y); }},
    {kind::string,
     "api",
     "tokens-file",
     "CMDBUS_API_TOKENS_FILE",
     form::value,
     {"--tokens-file", "PATH", "the tokens (see above)"},
     [](c& x, const v& y, bool) { x.api.tokens_file = as_string(y); }},
    {kind::integer,
     "api",
     "threads",
     "CMDBUS_API_THREADS",
     form::value,
     {"--threads", "N",
      "requests answered at once, GETs that wait included (default 16)"},
     [](c& x, const v& y, bool) { x.api.threads = as_int(y); }},
    {kind::integer,
     "api",
     "connections",
     "CMDBUS_API_CONNECTIONS",
     form::value,
     {"--connections", "N", "database connections (default 4)"},
     [](c& x, const v& y, bool) { x.api.connections = as_int(y); }},
  };
  for (auto& row : tls_settings<c>())
    rows.push_back(row);
  // The certificate's help as the API reads it.
  rows[4].opt.help
    = "serve HTTPS with this PEM certificate (chain); needs --tls-key; with "
      "--tls-ca-file or --tls-ca-path clients must present a certificate "
      "that CA signed (mutual TLS)";
  rows[6].opt.help = "PEM file of the CA certificates the clients' "
                     "certificates must be signed by (mutual TLS)";
  return {std::move(rows),
          {"api", "tls"},
          {},
          {"--config", "FILE",
           "CAF-INI config file with [api] and [tls] (else "
           "$CMDBUS_API_CONFIG, else none)"},
          "CMDBUS_API_CONFIG",
          nullptr,
          nullptr};
}

const settings_table<api_program_config>& api_table() {
  static const auto table = make_api_table();
  return table;
}

} // namespace

} // namespace detail

std::vector<std::string> validate_api(const api_config& api,
                                      std::string_view prefix) {
  std::vector<std::string> problems;
  auto name = [&](const char* key) { return std::string{prefix} + key; };
  if (!api.listen.empty()) {
    try {
      parse_http_address(api.listen);
    } catch (const std::invalid_argument& e) {
      problems.push_back(name("listen") + " (" + api.listen + "): " + e.what());
    }
  }
  if (api.threads < 1 || api.threads > 1024)
    problems.push_back(name("threads") + " (" + std::to_string(api.threads)
                       + ") must be 1..1024");
  if (api.connections < 1 || api.connections > 256)
    problems.push_back(name("connections") + " ("
                       + std::to_string(api.connections) + ") must be 1..256");
  return problems;
}

std::vector<std::string> validate_api_tls(const tls_config& tls) {
  std::vector<std::string> problems;
  if (!tls.enabled())
    return problems;
  if (tls.certificate.empty() || tls.key.empty())
    problems.emplace_back(
      std::string{"TLS of the API needs tls-certificate and tls-key "
                  "together (tls-ca-file or tls-ca-path besides asks clients "
                  "for certificates); missing: "}
      + (tls.certificate.empty() && tls.key.empty()
           ? "tls-certificate, tls-key"
           : (tls.certificate.empty() ? "tls-certificate" : "tls-key")));
  for (auto& p : unreadable_tls_files(tls))
    problems.push_back(std::move(p));
  return problems;
}

std::vector<std::string> validate(const api_program_config& cfg) {
  auto problems = validate_api(cfg.api, "");
  if (cfg.api.listen.empty())
    problems.emplace_back("listen: an address is required (ADDR:PORT)");
  for (auto& p : validate_api_tls(cfg.tls))
    problems.push_back(std::move(p));
  return problems;
}

namespace detail {

api_program_config
load_api(const std::optional<std::string>& file, const env_lookup& getenv,
         const std::function<std::optional<std::string>(std::string_view)>&
           command_line) {
  const auto& table = api_table();
  api_program_config cfg;
  if (file)
    apply_ini(cfg, table, read_config_file(*file), *file);
  apply_env(cfg, table, getenv);
  for (const auto& s : table.settings) {
    auto value = command_line(s.opt.name);
    if (!value)
      continue;
    try {
      s.store(cfg, from_text(s.type, *value), true);
    } catch (const value_error& e) {
      throw config_error("option " + std::string{s.opt.name} + " "
                         + e.what());
    }
  }
  auto problems = validate(cfg);
  if (!problems.empty()) {
    std::string text;
    for (const auto& p : problems)
      text += (text.empty() ? "" : "\n") + p;
    throw config_error(text);
  }
  return cfg;
}

std::vector<option> api_options() {
  std::vector<option> out;
  out.push_back(api_table().config_option);
  for (const auto& s : api_table().settings)
    out.push_back(s.opt);
  return out;
}

} // namespace detail

} // namespace cmdbus::config
