# Install rules (CMDBUS_INSTALL): the libraries, the tool, the public
# headers under include/cmdbus/, the exported targets with their package
# configuration (find_package(cmdbus)), pkg-config files and the licence.
#
# Components: Runtime (shared libraries, the tool, the licence) and
# Development (headers, link names, static libraries, CMake and pkg-config
# files). A container copies only `--component Runtime`.
include(CMakePackageConfigHelpers)

set(cmdbus_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/cmdbus)

# Outside /usr the tool finds the libraries next to it, wherever the prefix
# is moved (`cmake --install --prefix`, a container's /usr/local).
if(CMDBUS_SHARED AND NOT DEFINED CMAKE_INSTALL_RPATH
   AND NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  file(RELATIVE_PATH cmdbus_bin_to_lib
    ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(cmdbus PROPERTIES
    INSTALL_RPATH "$ORIGIN/${cmdbus_bin_to_lib}")
endif()

install(TARGETS cmdbus_client cmdbus_worker cmdbus_all
  EXPORT cmdbusTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          COMPONENT Runtime NAMELINK_COMPONENT Development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development)
install(TARGETS cmdbus RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)

get_property(cmdbus_headers GLOBAL PROPERTY cmdbus_public_headers)
foreach(header IN LISTS cmdbus_headers)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header}
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cmdbus/${dir} COMPONENT Development)
endforeach()
# The list, for the tests that compile every installed header alone.
string(REPLACE ";" "\n" cmdbus_headers_text "${cmdbus_headers}")
file(WRITE ${PROJECT_BINARY_DIR}/public-headers.txt "${cmdbus_headers_text}\n")

install(EXPORT cmdbusTargets NAMESPACE cmdbus:: FILE cmdbusTargets.cmake
  DESTINATION ${cmdbus_cmake_dir} COMPONENT Development)
configure_package_config_file(cmake/cmdbusConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmdbusConfig.cmake
  INSTALL_DESTINATION ${cmdbus_cmake_dir})
# 0.x: a minor version may break the API, so 0.1.x satisfies only 0.1.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmdbusConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/cmdbusConfig.cmake
  ${PROJECT_BINARY_DIR}/cmdbusConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
  DESTINATION ${cmdbus_cmake_dir} COMPONENT Development)

# pkg-config: under /usr the prefix is written as is (a sysroot, e.g.
# PKG_CONFIG_SYSROOT_DIR over an unpacked package, is added by pkg-config);
# elsewhere it is relative to the .pc file, so that a prefix given only to
# `cmake --install --prefix` or moved later still works.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(cmdbus_pc_prefix "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH cmdbus_pc_to_prefix
    ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
  string(REGEX REPLACE "/$" "" cmdbus_pc_to_prefix "${cmdbus_pc_to_prefix}")
  set(cmdbus_pc_prefix "\${pcfiledir}/${cmdbus_pc_to_prefix}")
endif()
foreach(pc cmdbus cmdbus-client)
  configure_file(cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT Development)
endforeach()

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT Runtime)
