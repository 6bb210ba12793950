# cmdbus-unit-test: GoogleTest suites without a database (model library:
# UUIDs, timestamps, enumerations, retry policy, JSON, wire codecs and their
# golden fixtures in tests/fixtures/wire/). Included from tests/CMakeLists.txt.

file(GLOB unit_test_sources CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/*.cpp)
# The external programs' runner and handlers (plain POSIX, no CAF), the
# health evaluation, the metrics, the status view with its renderers,
# the throughput window and the credit ledger (plain C++, no CAF) are
# tested without the actors; the demo workflow (apps/) alone. It links
# only libcmdbus-client: these sources must not also come from
# libcmdbus-worker.
add_executable(cmdbus-unit-test ${unit_test_sources}
  ${PROJECT_SOURCE_DIR}/actors/ops/admin_view.cpp
  ${PROJECT_SOURCE_DIR}/actors/ops/exposition.cpp
  ${PROJECT_SOURCE_DIR}/actors/ops/health.cpp
  ${PROJECT_SOURCE_DIR}/actors/ops/metrics.cpp
  ${PROJECT_SOURCE_DIR}/actors/ops/status_page.cpp
  ${PROJECT_SOURCE_DIR}/actors/ops/status_snapshot.cpp
  ${PROJECT_SOURCE_DIR}/actors/ops/throughput.cpp
  ${PROJECT_SOURCE_DIR}/actors/exec/exec_handler.cpp
  ${PROJECT_SOURCE_DIR}/actors/exec/exec_outcome.cpp
  ${PROJECT_SOURCE_DIR}/actors/exec/spawn_process.cpp
  ${PROJECT_SOURCE_DIR}/actors/handler_registry.cpp
  ${PROJECT_SOURCE_DIR}/actors/tick.cpp
  ${PROJECT_SOURCE_DIR}/actors/worker/credit_ledger.cpp
  ${PROJECT_SOURCE_DIR}/actors/worker/prefetch_tuner.cpp
  ${PROJECT_SOURCE_DIR}/apps/demo_workflows.cpp
  ${PROJECT_SOURCE_DIR}/api/operations.cpp
  ${PROJECT_SOURCE_DIR}/api/request.cpp
  ${PROJECT_SOURCE_DIR}/api/tokens.cpp)
target_link_libraries(cmdbus-unit-test PRIVATE
  cmdbus_client spdlog::spdlog cmdbus_rapidjson GTest::gtest GTest::gtest_main)
target_compile_definitions(cmdbus-unit-test PRIVATE
  CMDBUS_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  CMDBUS_EXPECTED_VERSION="${PROJECT_VERSION}")
cmdbus_warnings(cmdbus-unit-test)
cmdbus_test_build(cmdbus-unit-test ${cmdbus_test_common_headers})
cmdbus_gtest_tests(cmdbus-unit-test DISCOVERY_TIMEOUT 60)

# libFuzzer run over the wire decoders (scripts/fuzz builds with clang++
# directly, outside CMake, into this build tree).
find_program(CLANGXX clang++)
if(CLANGXX)
  add_test(NAME fuzz.wire_decoders
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/fuzz --seconds 20
            --out ${CMAKE_BINARY_DIR}/fuzz)
  set_tests_properties(fuzz.wire_decoders PROPERTIES TIMEOUT 600 LABELS fuzz)
endif()
