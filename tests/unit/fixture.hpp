#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace cmdbus::test {

/// Returns the content of tests/fixtures/wire/`name` without its single
/// trailing newline (the fixtures are text files; messages have none).
inline std::string wire_fixture(const std::string& name) {
  auto path = std::string{CMDBUS_SOURCE_DIR} + "/tests/fixtures/wire/" + name;
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw std::runtime_error("cannot read fixture " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  auto text = buf.str();
  if (!text.empty() && text.back() == '\n')
    text.pop_back();
  return text;
}

} // namespace cmdbus::test
