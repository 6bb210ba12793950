#pragma once

// A private temporary directory for a test's files, removed with everything
// in it at the end of the scope.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cmdbus::test {

class temp_dir {
public:
  temp_dir() {
    auto tmpl
      = (std::filesystem::temp_directory_path() / "cmdbus-test-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }

  /// The path of `name` in the directory (the file need not exist).
  std::string file(const std::string& name) const {
    return (path / name).string();
  }

  /// Writes `content` to `name` in the directory and returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    auto p = file(name);
    std::ofstream{p, std::ios::binary} << content;
    return p;
  }

  std::filesystem::path path;
};

} // namespace cmdbus::test
