#pragma once

// What the tests of the command API over TLS share (api_tls_test.cpp,
// worker_api_test.cpp): a test CA with the server's, a client's and a
// stranger's certificates, and curl over HTTPS to the API.

#include <optional>
#include <string>
#include <vector>

#include "cmdbus/config/network_config.hpp"
#include "tests/support/certificates.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace cmdbus::test::api_tls {

/// A CA, the server's certificate for "localhost", a client certificate
/// of that CA, and one of another CA.
struct certificates {
  temp_dir dir;
  certificates() {
    make_ca(dir.path.string(), "ca");
    make_ca(dir.path.string(), "other_ca");
    make_cert(dir.path.string(), "localhost", "ca");
    make_cert(dir.path.string(), "client", "ca");
    make_cert(dir.path.string(), "stranger", "other_ca");
  }
  std::string pem(const std::string& name) const {
    return dir.file(name + ".pem");
  }
  std::string key(const std::string& name) const {
    return dir.file(name + ".key");
  }
  /// The API's set: HTTPS, and with `mutual` client certificates of "ca".
  config::tls_config server(bool mutual) const {
    config::tls_config tls;
    tls.certificate = pem("localhost");
    tls.key = key("localhost");
    if (mutual)
      tls.ca_file = pem("ca");
    return tls;
  }
};

struct reply {
  /// 0: no HTTP answer (curl's exit code says why).
  int status = 0;
  int curl_exit = 0;
  std::string headers;
  std::string body;
};

/// curl's arguments for a request to the API at https://localhost:PORT
/// (resolved to 127.0.0.1) trusting the test CA; `client` names a client
/// certificate to present ("" none).
inline std::vector<std::string> https_args(const certificates& certs, int port,
                                    const std::string& method,
                                    const std::string& path,
                                    const std::string& client = "") {
  auto p = std::to_string(port);
  std::vector<std::string> argv{"/usr/bin/curl",
                                "-s",
                                "-i",
                                "--max-time",
                                "40",
                                "--resolve",
                                "localhost:" + p + ":127.0.0.1",
                                "--cacert",
                                certs.pem("ca"),
                                "-X",
                                method,
                                "https://localhost:" + p + path};
  if (!client.empty())
    argv.insert(argv.end(),
                {"--cert", certs.pem(client), "--key", certs.key(client)});
  return argv;
}

inline reply run_curl(std::vector<std::string> argv, const std::string& tok,
               const std::optional<std::string>& body = std::nullopt) {
  if (!tok.empty())
    argv.insert(argv.end(), {"-H", "Authorization: Bearer " + tok});
  if (body)
    argv.insert(argv.end(), {"-H", "Content-Type: application/json",
                             "--data-binary", "@-"});
  auto r = run_process(argv, {}, body);
  reply out;
  out.curl_exit = r.exit_code;
  auto split = r.out.find("\r\n\r\n");
  out.headers = r.out.substr(0, split);
  out.body = split == std::string::npos ? "" : r.out.substr(split + 4);
  if (r.out.rfind("HTTP/1.1 ", 0) == 0)
    out.status = std::stoi(r.out.substr(9, 3));
  return out;
}

inline reply https(const certificates& certs, int port, const std::string& method,
            const std::string& path, const std::string& tok,
            const std::optional<std::string>& body = std::nullopt,
            const std::string& client = "") {
  return run_curl(https_args(certs, port, method, path, client), tok, body);
}

inline bool has(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

} // namespace cmdbus::test::api_tls
