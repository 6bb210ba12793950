#include "tests/support/tls_server.hpp"

#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include <sys/stat.h>

#include "tests/support/certificates.hpp"
#include "tests/support/server_programs.hpp"
#include "tests/support/tcp_proxy.hpp"

namespace cmdbus::test {

namespace {

namespace fs = std::filesystem;

constexpr const char* who = "tls_server";

/// The CA that signs the server's certificate, the one that signs nothing
/// of it, and the host name of the certificate (its files' name too).
constexpr const char* server_ca = "server-ca";
constexpr const char* other_ca = "other-ca";
constexpr const char* host_name = "localhost";

/// A password of 24 random letters and digits.
std::string random_password() {
  static constexpr char chars[] = "abcdefghijklmnopqrstuvwxyz"
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  std::uniform_int_distribution<size_t> pick{0, sizeof chars - 2};
  std::string out = "pw-";
  for (int i = 0; i < 24; ++i)
    out += chars[pick(rd)];
  return out;
}

void write_file(const fs::path& file, const std::string& text) {
  std::ofstream out{file, std::ios::trunc};
  out << text;
  if (!out)
    throw std::runtime_error(std::string{who} + ": cannot write "
                             + file.string());
}

} // namespace

tls_server::tls_server(std::string dbname)
  : dbname_(std::move(dbname)), password_(random_password()) {
  dir_ = make_server_folder("cmdbus-tls");
  try {
    fs::path dir{dir_};
    fs::create_directory(dir / "run");
    give_to_server(dir / "run", who);
    make_ca(dir_, server_ca);
    make_ca(dir_, other_ca);
    make_cert(dir_, host_name, server_ca);
    // The server refuses a key that others may read, or that is not its
    // user's.
    auto key = dir / (std::string{host_name} + ".key");
    fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
    give_to_server(key, who);
    auto pwfile = dir / "password";
    write_file(pwfile, password_ + "\n");
    give_to_server(pwfile, who);
    port_ = free_port();

    run("initdb", {"-D", (dir / "data").string(), "-U", "cmdbus",
                   "--pwfile=" + pwfile.string(), "--auth-local=trust",
                   "--auth-host=scram-sha-256", "-E", "UTF8",
                   "--locale=C.UTF-8", "--no-sync"});
    fs::remove(pwfile);
    append_to(dir / "data" / "postgresql.conf",
              "\n# --- tests/support/tls_server ---\n"
              "listen_addresses = '127.0.0.1'\n"
              "port = "
                + std::to_string(port_)
                + "\n"
                  "unix_socket_directories = '"
                + (dir / "run").string()
                + "'\n"
                  "max_connections = 50\n"
                  "shared_buffers = 32MB\n"
                  // Only processes die here, never the host.
                  "fsync = off\n"
                  "logging_collector = off\n"
                  "ssl = on\n"
                  "ssl_cert_file = '"
                + (dir / (std::string{host_name} + ".pem")).string()
                + "'\n"
                  "ssl_key_file = '"
                + key.string() + "'\n",
              who);
    // TCP over TLS only, with a password; the socket trusts.
    write_file(dir / "data" / "pg_hba.conf",
               "local all all trust\n"
               "hostssl all all 127.0.0.1/32 scram-sha-256\n");
    run("pg_ctl", {"-D", (dir / "data").string(), "-l",
                   (dir / "server.log").string(), "-w", "-t", "60", "start"});
    alive_ = true;
    run("createdb", {"-h", (dir / "run").string(), "-p", std::to_string(port_),
                     "-U", "cmdbus", dbname_});
  } catch (const std::exception& e) {
    auto what = std::string{e.what()} + "\n" + logs();
    shut_down();
    throw std::runtime_error(what);
  }
}

tls_server::~tls_server() {
  shut_down();
}

void tls_server::shut_down() noexcept {
  if (alive_) {
    alive_ = false;
    try {
      run("pg_ctl", {"-D", (fs::path{dir_} / "data").string(), "-m",
                     "immediate", "-w", "stop"});
    } catch (const std::exception&) {
      // Already gone: nothing to stop.
    }
  }
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    dir_.clear();
  }
}

std::string tls_server::ca_file() const {
  return dir_ + "/" + server_ca + ".pem";
}

std::string tls_server::other_ca_file() const {
  return dir_ + "/" + other_ca + ".pem";
}

std::string tls_server::dsn(int port) const {
  return std::string{"host="} + host_name + " hostaddr=127.0.0.1 port="
         + std::to_string(port > 0 ? port : port_) + " dbname=" + dbname_
         + " user=cmdbus sslmode=verify-full sslrootcert=" + ca_file();
}

std::string tls_server::socket_dsn() const {
  return "host=" + dir_ + "/run port=" + std::to_string(port_)
         + " dbname=" + dbname_ + " user=cmdbus";
}

void tls_server::restart() {
  fs::path dir{dir_};
  run("pg_ctl",
      {"-D", (dir / "data").string(), "-l", (dir / "server.log").string(), "-m",
       "immediate", "-w", "-t", "60", "restart"});
}

std::string tls_server::logs() const {
  return "--- server log (tail) ---\n"
         + tail_of(fs::path{dir_} / "server.log", 30);
}

void tls_server::run(const std::string& program,
                     const std::vector<std::string>& args) {
  run_server_program(dir_, program, args, who);
}

} // namespace cmdbus::test
