#pragma once

// Test certificates made with the `openssl` tool: a CA, and certificates it
// signs, as PEM files in a directory (RSA 2048, valid two days).

#include <string>

namespace cmdbus::test {

/// Makes the self-signed CA `dir`/NAME.pem with its key `dir`/NAME.key;
/// throws std::runtime_error with openssl's message when it fails.
void make_ca(const std::string& dir, const std::string& name);

/// Makes `dir`/NAME.pem with its key `dir`/NAME.key, signed by the CA
/// `dir`/CA.pem; throws std::runtime_error when it fails.
void make_cert(const std::string& dir, const std::string& name,
               const std::string& ca);

} // namespace cmdbus::test
