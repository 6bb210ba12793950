#include "cmdbus/model/version.hpp"

#include <string>

#include <gtest/gtest.h>

namespace {

// The library reports the version of project() in CMakeLists.txt, the one
// the package files (cmdbusConfigVersion.cmake, cmdbus.pc) carry too.
TEST(Version, IsTheProjectVersion) {
  EXPECT_EQ(std::string{cmdbus::version()}, CMDBUS_EXPECTED_VERSION);
}

} // namespace
