# CMDBUS_SANITIZE: builds every target of this project with compiler
# sanitizers (scripts/sanitize uses it). The value is a comma-separated list
# for -fsanitize=, e.g. "address,undefined" or "thread"; empty (the default)
# builds without sanitizers. Libraries from the system (CAF, libpq, spdlog)
# stay uninstrumented.
#
# Undefined-behaviour checks stay recoverable on purpose: UBSan consults its
# suppressions file only for recoverable checks, and the runtime is told to
# stop at the first report instead (UBSAN_OPTIONS=halt_on_error=1, which
# scripts/sanitize sets), so an unsuppressed report still fails the test.
set(CMDBUS_SANITIZE "" CACHE STRING
  "Comma-separated -fsanitize= list for all targets (e.g. address,undefined or thread); empty for none")

if(CMDBUS_SANITIZE)
  if(CMDBUS_SANITIZE MATCHES "thread" AND CMDBUS_SANITIZE MATCHES "address")
    message(FATAL_ERROR "CMDBUS_SANITIZE: thread and address cannot be combined")
  endif()
  set(cmdbus_sanitize_flags -fsanitize=${CMDBUS_SANITIZE} -fno-omit-frame-pointer)
  add_compile_options(${cmdbus_sanitize_flags})
  add_link_options(${cmdbus_sanitize_flags})
  if(CMDBUS_SANITIZE MATCHES "thread")
    # Every target created from here on links the report filter for the
    # uninstrumented CAF library (see the file); it is not instrumented
    # itself, as TSan calls it while reporting.
    add_library(cmdbus_tsan_caf_filter OBJECT
      ${PROJECT_SOURCE_DIR}/tests/sanitizers/tsan_caf_filter.cpp)
    target_compile_options(cmdbus_tsan_caf_filter PRIVATE -fno-sanitize=thread)
    target_link_libraries(cmdbus_tsan_caf_filter PRIVATE ${CMAKE_DL_LIBS})
    link_libraries(cmdbus_tsan_caf_filter)
  endif()
  message(STATUS "cmdbus: sanitizers enabled: ${CMDBUS_SANITIZE}")
endif()
