# CMDBUS_SANITIZE: builds every target of this project with compiler
# sanitizers (scripts/sanitize uses it). The value is a comma-separated list
# for -fsanitize=, e.g. "address,undefined" or "thread"; empty (the default)
# builds without sanitizers. Libraries from the system (libpq, spdlog) stay
# uninstrumented; for "thread", scripts/sanitize links a CAF built with
# ThreadSanitizer (-DCAF_CORE_LIBRARY=...).
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
  message(STATUS "cmdbus: sanitizers enabled: ${CMDBUS_SANITIZE}")
endif()
