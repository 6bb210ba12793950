# Script mode (cmake -P): writes OUTPUT, one add_test per test suite of the
# GoogleTest executable EXECUTABLE, each running "<Suite>.*" in one process
# (see GTestSuites.cmake).
execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE listing
  RESULT_VARIABLE rc
  TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${rc}):\n${listing}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
foreach(line IN LISTS lines)
  # Suites start in the first column and end with a dot ("Suite." or
  # "Prefix/Suite.  # TypeParam = ..."); their cases are indented.
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND content
      "add_test([==[${suite}.*]==] \"${EXECUTABLE}\" [==[--gtest_filter=${suite}.*]==])\n")
  endif()
endforeach()
file(WRITE "${OUTPUT}" "${content}")
