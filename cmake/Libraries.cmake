# The two libraries an application links, and what the tool, tests and
# benchmarks link besides. Each folder adds its sources with target_sources.
#
#   cmdbus::client  (libcmdbus-client): model/, db/, sql/, config/ and the
#                   process store and definitions; the send API, the
#                   operator API, migrations. No CAF.
#   cmdbus::worker  (libcmdbus-worker): the worker runtime on CAF (actors/,
#                   the process managers' actors, the reusable worker
#                   program, the handler node). Links cmdbus::client and
#                   CAF::core; CAF::io and CAF::openssl privately (loaded
#                   only by processes that talk to other processes).
#   cmdbus::cmdbus  both.
if(CMDBUS_SHARED)
  set(cmdbus_library_type SHARED)
else()
  set(cmdbus_library_type STATIC)
endif()

add_library(cmdbus_client ${cmdbus_library_type})
add_library(cmdbus_worker ${cmdbus_library_type})
foreach(lib client worker)
  set_target_properties(cmdbus_${lib} PROPERTIES
    OUTPUT_NAME cmdbus-${lib}
    EXPORT_NAME ${lib}
    VERSION ${PROJECT_VERSION}
    # 0.x: the ABI may change with every minor version.
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
    POSITION_INDEPENDENT_CODE ON)
  target_include_directories(cmdbus_${lib} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # Calls inside a shared library stay direct (and inlinable).
  target_compile_options(cmdbus_${lib} PRIVATE
    $<$<CXX_COMPILER_ID:GNU>:-fno-semantic-interposition>)
  cmdbus_warnings(cmdbus_${lib})
  add_library(cmdbus::${lib} ALIAS cmdbus_${lib})
endforeach()

# CAF's umbrella header is about 4 s of every actor source's compile (11 to
# 18 s at -O2): libcmdbus-worker precompiles it once, which makes each of
# its 26 actor sources about 6 s quicker, in every build CI makes (the
# optimised one, the packages, both sanitizers, the FetchContent consumer).
# Loading the precompiled header costs a source about a second, so the
# sources that include no CAF are added without it, with
# cmdbus_worker_sources_without_caf.
target_precompile_headers(cmdbus_worker PRIVATE <caf/all.hpp>)
# Usage (in a folder's CMakeLists.txt):
#   cmdbus_worker_sources_without_caf(listener.cpp ...)
function(cmdbus_worker_sources_without_caf)
  target_sources(cmdbus_worker PRIVATE ${ARGN})
  set_source_files_properties(${ARGN} TARGET_DIRECTORY cmdbus_worker
    PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
endfunction()

target_link_libraries(cmdbus_client
  PUBLIC Threads::Threads
  PRIVATE PostgreSQL::PostgreSQL spdlog::spdlog date::date-tz $<BUILD_INTERFACE:cmdbus_rapidjson>)
target_link_libraries(cmdbus_worker
  PUBLIC cmdbus_client CAF::core
  PRIVATE CAF::io CAF::openssl OpenSSL::SSL PostgreSQL::PostgreSQL spdlog::spdlog
          PkgConfig::httplib $<BUILD_INTERFACE:cmdbus_rapidjson>)

# `cmdbus::cmdbus`: the name most applications link. (The target `cmdbus`
# is the tool.)
add_library(cmdbus_all INTERFACE)
target_link_libraries(cmdbus_all INTERFACE cmdbus_client cmdbus_worker)
set_target_properties(cmdbus_all PROPERTIES EXPORT_NAME cmdbus)
add_library(cmdbus::cmdbus ALIAS cmdbus_all)

# Not exported: the private headers and dependencies the tool, tests and
# benchmarks use besides the public API.
add_library(cmdbus_internal INTERFACE)
target_link_libraries(cmdbus_internal INTERFACE cmdbus_client cmdbus_worker
  CAF::io CAF::openssl spdlog::spdlog PostgreSQL::PostgreSQL cmdbus_rapidjson PkgConfig::httplib
  Threads::Threads)
