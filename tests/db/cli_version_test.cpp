#include <string>

#include <gtest/gtest.h>

#include "cmdbus/model/version.hpp"
#include "tests/support/process.hpp"

namespace cmdbus::test {
namespace {

// `cmdbus --version` prints the library's version (project() in
// CMakeLists.txt) and needs no database.
TEST(CliVersion, PrintsTheProjectVersion) {
  auto r = run_cmdbus({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string{"cmdbus "} + CMDBUS_EXPECTED_VERSION + "\n");
  EXPECT_EQ(std::string{version()}, CMDBUS_EXPECTED_VERSION);
}

} // namespace
} // namespace cmdbus::test
