#pragma once

// What the configuration tests of the worker and the handler node share: a
// fake environment, the message of a config_error, a temporary file, reading a
// file whole, and a substring check.

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "cmdbus/config/common.hpp"

namespace cmdbus::test {

/// A fake environment for apply_env() and the loaders.
class fake_env {
public:
  explicit fake_env(std::map<std::string, std::string> vars = {})
    : vars_(std::move(vars)) {
    // nop
  }

  config::env_lookup lookup() const {
    return [this](const char* name) -> std::optional<std::string> {
      auto i = vars_.find(name);
      if (i == vars_.end())
        return std::nullopt;
      return i->second;
    };
  }

private:
  std::map<std::string, std::string> vars_;
};

/// Returns the message of the config_error thrown by `f`, or "".
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const config::config_error& e) {
    return e.what();
  }
  return {};
}

/// The whole text of the file at `path`; throws when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    throw std::runtime_error("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// A temporary file with `content`, removed on destruction.
class temp_file {
public:
  explicit temp_file(const std::string& content) {
    char name[] = "/tmp/cmdbus-config-test-XXXXXX";
    int fd = mkstemp(name);
    if (fd < 0)
      throw std::runtime_error("mkstemp failed");
    close(fd);
    path_ = name;
    std::ofstream{path_} << content;
  }

  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;

  ~temp_file() {
    std::remove(path_.c_str());
  }

  const std::string& path() const noexcept {
    return path_;
  }

private:
  std::string path_;
};

} // namespace cmdbus::test
