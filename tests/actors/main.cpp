// The test runner of cmdbus-actor-test (CAF's unit-test framework).
#define CAF_SUITE actors
#define CAF_TEST_NO_MAIN
#include <caf/test/unit_test_impl.hpp>

int main(int argc, char** argv) {
  return caf::test::main(argc, argv);
}
