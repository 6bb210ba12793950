#include "tests/support/server_programs.hpp"

#include <fstream>
#include <stdexcept>

#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/support/process.hpp"

namespace cmdbus::test {

namespace {

/// The system user the servers run as when the tests run as root.
constexpr const char* server_user = "postgres";

bool is_root() {
  return ::geteuid() == 0;
}

} // namespace

std::string make_server_folder(const std::string& prefix) {
  auto tmpl = "/tmp/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    throw std::runtime_error(prefix + ": mkdtemp failed");
  std::string dir = buf.data();
  give_to_server(dir, prefix);
  return dir;
}

void give_to_server(const std::filesystem::path& path, const std::string& who) {
  if (!is_root())
    return;
  auto* pw = ::getpwnam(server_user);
  if (pw == nullptr)
    throw std::runtime_error(who + ": no system user " + server_user);
  if (::chown(path.c_str(), pw->pw_uid, pw->pw_gid) != 0)
    throw std::runtime_error(who + ": chown " + path.string() + " failed");
}

void append_to(const std::filesystem::path& file, const std::string& text,
               const std::string& who) {
  std::ofstream out{file, std::ios::app};
  out << text;
  if (!out)
    throw std::runtime_error(who + ": cannot write " + file.string());
}

std::string tail_of(const std::filesystem::path& file, size_t n) {
  std::ifstream in{file};
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(std::move(line));
  std::string out;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size();
       ++i)
    out += lines[i] + "\n";
  return out;
}

void run_server_program(const std::string& dir, const std::string& program,
                        const std::vector<std::string>& args,
                        const std::string& who) {
  std::vector<std::string> argv;
  if (is_root())
    argv = {"/usr/sbin/runuser", "-u", server_user, "--"};
  argv.insert(argv.end(), {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir,
                           std::string{postgres_bindir} + "/" + program});
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_process(argv);
  if (r.exit_code != 0)
    throw std::runtime_error(who + ": " + program + " failed (exit "
                             + std::to_string(r.exit_code) + "): " + r.err
                             + r.out);
}

} // namespace cmdbus::test
