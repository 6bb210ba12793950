#include "tests/support/certificates.hpp"

#include <stdexcept>
#include <vector>

#include "tests/support/process.hpp"

namespace cmdbus::test {

namespace {

void openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_process(argv);
  if (r.exit_code != 0)
    throw std::runtime_error("openssl " + args.at(0) + " failed: " + r.err);
}

} // namespace

void make_ca(const std::string& dir, const std::string& name) {
  auto base = dir + "/" + name;
  openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
           base + ".key", "-out", base + ".pem", "-days", "2", "-subj",
           "/CN=" + name});
}

void make_cert(const std::string& dir, const std::string& name,
               const std::string& ca) {
  auto base = dir + "/" + name;
  auto ca_base = dir + "/" + ca;
  openssl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", base + ".key",
           "-out", base + ".csr", "-subj", "/CN=" + name});
  openssl({"x509", "-req", "-in", base + ".csr", "-CA", ca_base + ".pem",
           "-CAkey", ca_base + ".key", "-CAcreateserial", "-out",
           base + ".pem", "-days", "2"});
}

} // namespace cmdbus::test
