#pragma once

// Settings shared by every process that talks to other cmdbus processes over
// CAF's middleman (a worker with remote handler pools, `cmdbus node`): the
// TLS certificate set and the address of a remote node. No CAF includes.
//
// TLS is all or nothing: a certificate, its private key and a trust anchor
// (a CA file, a CA directory or both) together, or none of them. CAF's
// OpenSSL module throws while the actor system is built when only part of
// the set is given; validate() refuses that before CAF sees it. With TLS
// both sides present a certificate and each verifies the other's chain
// against its trust anchor; CAF checks no host name, so any certificate the
// CA signed is accepted.

#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/config/common.hpp"

namespace cmdbus::config {

/// The TLS set of one process (the same fields as CAF's openssl.*
/// options). Empty: no TLS (the connections are cleartext and
/// unauthenticated).
struct tls_config {
  /// PEM certificate (chain) this process presents.
  std::string certificate;
  /// PEM private key of `certificate`.
  std::string key;
  /// PEM file of trusted CA certificates.
  std::string ca_file;
  /// Directory of trusted CA certificates (c_rehash layout).
  std::string ca_path;
  /// Passphrase of an encrypted `key`; never printed.
  std::string passphrase;

  /// Whether any field is set (validate() then requires the whole set).
  bool enabled() const noexcept {
    return !certificate.empty() || !key.empty() || !ca_file.empty()
           || !ca_path.empty() || !passphrase.empty();
  }
};

/// Problems of `tls` (empty when valid): a partial set (certificate, key and
/// a CA file or CA path are required together), and files or a directory
/// that cannot be read. Each problem is one sentence naming the setting by
/// its option name (tls-certificate, tls-key, tls-ca-file, tls-ca-path,
/// tls-passphrase).
std::vector<std::string> validate_tls(const tls_config& tls);

/// The files and the directory of `tls` that are given but cannot be read
/// (one sentence each, as validate_tls says them).
std::vector<std::string> unreadable_tls_files(const tls_config& tls);

/// One line for logs and --dump-config: "off", or "on (certificate PATH,
/// ca-file PATH, ...)"; never the passphrase.
std::string describe_tls(const tls_config& tls);

/// Applies CMDBUS_TLS_CERTIFICATE, CMDBUS_TLS_KEY, CMDBUS_TLS_CA_FILE,
/// CMDBUS_TLS_CA_PATH and CMDBUS_TLS_PASSPHRASE (an empty variable counts as
/// unset): the [tls] settings of a worker's or a node's configuration, for a
/// program that reads nothing else (`cmdbus cluster`).
void apply_tls_env(tls_config& tls, const env_lookup& getenv);

/// This machine's host name ("localhost" when it has none).
std::string host_name();

/// Whether `host` (of a listen address) is a loopback address: localhost,
/// ::1 or any 127.x.y.z. A listener elsewhere without TLS is warned about.
bool is_loopback(std::string_view host);

/// Parses the address of a remote node, "HOST:PORT" or "[IPV6]:PORT" (":PORT"
/// means 127.0.0.1); the port must be 1..65535. Throws std::invalid_argument
/// saying what is wrong.
http_address parse_node_address(std::string_view text);

} // namespace cmdbus::config
