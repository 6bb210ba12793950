# cmdbus_gtest_tests(<target> [gtest_discover_tests options...]): the ctest
# entries of a GoogleTest executable. By default one entry per test case
# (gtest_discover_tests, with the options given). With
# CMDBUS_TEST_PER_SUITE=ON one entry per test suite instead, named
# "<Suite>.*", which runs the suite's cases in one process: for builds whose
# processes are slow to start and stop (AddressSanitizer's: about a second
# per process, more than most of our test cases take). The suites are listed
# after each build (cmake/ListGTestSuites.cmake), like gtest_discover_tests
# lists the cases.
include(GoogleTest)
option(CMDBUS_TEST_PER_SUITE
  "One ctest entry per GoogleTest suite instead of per test case" OFF)

function(cmdbus_gtest_tests target)
  if(NOT CMDBUS_TEST_PER_SUITE)
    gtest_discover_tests(${target} ${ARGN})
    return()
  endif()
  set(listed "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${CMAKE_COMMAND}" -D "EXECUTABLE=$<TARGET_FILE:${target}>"
            -D "OUTPUT=${listed}"
            -P "${PROJECT_SOURCE_DIR}/cmake/ListGTestSuites.cmake"
    VERBATIM)
  # ctest reads the list when it exists; before the first build it names
  # the missing executable instead of failing to read the directory.
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  file(WRITE "${include_file}"
    "if(EXISTS \"${listed}\")\n"
    "  include(\"${listed}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
