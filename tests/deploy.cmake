# deploy.*: checks of the deployment files in deploy/ (label `deploy`).
# Included from tests/CMakeLists.txt. Not in sanitizer builds: their
# binaries link the sanitizer runtimes, which no runtime image installs.
if(CMDBUS_SANITIZE)
  return()
endif()

# The worker the unit runs: the example's payments-worker when it is built in
# this tree, else the tool's demo worker (same options).
if(CMDBUS_BUILD_EXAMPLES)
  set(deploy_worker $<TARGET_FILE:payments-worker>)
  set(deploy_worker_args "")
else()
  set(deploy_worker $<TARGET_FILE:cmdbus>)
  set(deploy_worker_args worker)
endif()
add_test(NAME deploy.systemd_unit
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_unit.sh
          ${PROJECT_SOURCE_DIR} ${deploy_worker} ${deploy_worker_args})

# The programs and shared libraries the container image copies.
set(deploy_binaries $<TARGET_FILE:cmdbus>)
foreach(t cmdbus_client cmdbus_worker)
  if(TARGET ${t})
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "SHARED_LIBRARY")
      list(APPEND deploy_binaries $<TARGET_FILE:${t}>)
    endif()
  endif()
endforeach()
if(CMDBUS_BUILD_EXAMPLES)
  list(APPEND deploy_binaries $<TARGET_FILE:payments-worker>)
endif()
add_test(NAME deploy.container_packages
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_container.sh
          ${PROJECT_SOURCE_DIR}/deploy/Dockerfile ${deploy_binaries})

set_tests_properties(deploy.systemd_unit deploy.container_packages
  PROPERTIES LABELS deploy TIMEOUT 60)
