#include "cmdbus/config/network_config.hpp"

#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace cmdbus::config {

namespace {

// Returns a problem with the path `value` of the setting `name` (empty:
// none): it must be a readable regular file, or a readable directory when
// `directory`.
std::string unreadable(const char* name, const std::string& value,
                       bool directory) {
  if (value.empty())
    return {};
  struct stat st {};
  if (::stat(value.c_str(), &st) != 0)
    return std::string{name} + " (" + value + "): no such file or directory";
  if (directory && !S_ISDIR(st.st_mode))
    return std::string{name} + " (" + value + "): not a directory";
  if (!directory && !S_ISREG(st.st_mode))
    return std::string{name} + " (" + value + "): not a regular file";
  if (::access(value.c_str(), directory ? (R_OK | X_OK) : R_OK) != 0)
    return std::string{name} + " (" + value + "): not readable";
  return {};
}

} // namespace

std::vector<std::string> validate_tls(const tls_config& tls) {
  std::vector<std::string> problems;
  if (!tls.enabled())
    return problems;
  auto missing = std::vector<std::string>{};
  if (tls.certificate.empty())
    missing.emplace_back("tls-certificate");
  if (tls.key.empty())
    missing.emplace_back("tls-key");
  if (tls.ca_file.empty() && tls.ca_path.empty())
    missing.emplace_back("tls-ca-file or tls-ca-path");
  if (!missing.empty()) {
    auto text = std::string{"TLS needs tls-certificate, tls-key and "
                            "tls-ca-file or tls-ca-path together; missing: "};
    for (size_t i = 0; i < missing.size(); ++i)
      text += (i > 0 ? ", " : "") + missing[i];
    problems.push_back(std::move(text));
  }
  for (auto& problem : unreadable_tls_files(tls))
    problems.push_back(std::move(problem));
  return problems;
}

std::vector<std::string> unreadable_tls_files(const tls_config& tls) {
  std::vector<std::string> problems;
  for (auto problem : {unreadable("tls-certificate", tls.certificate, false),
                       unreadable("tls-key", tls.key, false),
                       unreadable("tls-ca-file", tls.ca_file, false),
                       unreadable("tls-ca-path", tls.ca_path, true)})
    if (!problem.empty())
      problems.push_back(std::move(problem));
  return problems;
}

std::string describe_tls(const tls_config& tls) {
  if (!tls.enabled())
    return "off";
  auto text = std::string{"on (certificate "} + tls.certificate;
  if (!tls.key.empty())
    text += ", key " + tls.key;
  if (!tls.ca_file.empty())
    text += ", ca-file " + tls.ca_file;
  if (!tls.ca_path.empty())
    text += ", ca-path " + tls.ca_path;
  if (!tls.passphrase.empty())
    text += ", passphrase set";
  return text + ")";
}

http_address parse_node_address(std::string_view text) {
  if (text.rfind(':') == std::string_view::npos)
    throw std::invalid_argument("expected HOST:PORT, e.g. 10.0.0.5:7400");
  auto address = parse_http_address(text);
  if (address.port == 0)
    throw std::invalid_argument("the port must be a number from 1 to 65535");
  return address;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

bool is_loopback(std::string_view host) {
  return host == "localhost" || host == "::1" || host.substr(0, 4) == "127.";
}

} // namespace cmdbus::config
