// The test support's child-process runner (tests/support/process.cpp): exit
// codes and output, and the rule that a sanitizer report in a child's stderr
// fails the test that ran the child, whatever the child's exit code.

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "tests/support/process.hpp"

using namespace cmdbus;

TEST(TestProcess, ReturnsExitCodeAndOutput) {
  auto r = test::run_process({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
}

TEST(TestProcess, SanitizerReportOfAChildFailsTheTest) {
  EXPECT_NONFATAL_FAILURE(
    test::run_process({"/bin/sh", "-c",
                       "echo '==7==ERROR: AddressSanitizer: heap-use-after-free' >&2"}),
    "printed a sanitizer report");
  EXPECT_NONFATAL_FAILURE(
    test::run_process({"/bin/sh", "-c",
                       "echo 'x.cpp:1:2: runtime error: signed integer overflow' >&2; exit 1"}),
    "printed a sanitizer report");
  EXPECT_NONFATAL_FAILURE(
    test::run_process({"/bin/sh", "-c", "echo 'WARNING: ThreadSanitizer: data race' >&2; kill -9 $$"}),
    "printed a sanitizer report");
}
