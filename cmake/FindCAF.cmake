# FindCAF: locates the C++ Actor Framework 0.17.x as packaged by Debian
# (libcaf-dev ships neither a CMake config nor a pkg-config file).
#
# Imported targets: CAF::core, CAF::io, and CAF::openssl (the TLS transport
# of the middleman; links OpenSSL::SSL, found here) when libcaf_openssl and
# OpenSSL's development files are there (CAF_OPENSSL_FOUND). Variables:
# CAF_FOUND, CAF_VERSION, CAF_INCLUDE_DIR. Use: find_package(CAF 0.17.6
# REQUIRED).
include(FindPackageHandleStandardArgs)
find_package(Threads REQUIRED)
if(CAF_FIND_QUIETLY)
  find_package(OpenSSL QUIET)
else()
  find_package(OpenSSL)
endif()

find_path(CAF_INCLUDE_DIR caf/config.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
find_library(CAF_OPENSSL_LIBRARY caf_openssl)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_v "${_caf_version_line}")
  if(_caf_v)
    math(EXPR _caf_major "${_caf_v} / 10000")
    math(EXPR _caf_minor "(${_caf_v} / 100) % 100")
    math(EXPR _caf_patch "${_caf_v} % 100")
    set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
  endif()
endif()

find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND AND NOT TARGET CAF::core)
  add_library(CAF::core UNKNOWN IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(CAF::io UNKNOWN IMPORTED)
  set_target_properties(CAF::io PROPERTIES
    IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
    INTERFACE_LINK_LIBRARIES CAF::core)
endif()
if(CAF_FOUND AND CAF_OPENSSL_LIBRARY AND OPENSSL_FOUND
   AND NOT TARGET CAF::openssl)
  add_library(CAF::openssl UNKNOWN IMPORTED)
  set_target_properties(CAF::openssl PROPERTIES
    IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
    INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL;OpenSSL::Crypto")
endif()
if(TARGET CAF::openssl)
  set(CAF_OPENSSL_FOUND TRUE)
else()
  set(CAF_OPENSSL_FOUND FALSE)
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
                 CAF_OPENSSL_LIBRARY)
