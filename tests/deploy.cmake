# deploy.*: checks of the deployment files in deploy/ (label `deploy`), and
# docs.readme_commands. Included from tests/CMakeLists.txt.

# The README's commands for applications are the ones CI runs.
add_test(NAME docs.readme_commands
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_readme_commands.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(docs.readme_commands PROPERTIES LABELS deploy TIMEOUT 60)

# Not in sanitizer builds: their binaries link the sanitizer runtimes, which
# no runtime image installs.
if(CMDBUS_SANITIZE)
  return()
endif()

# Run at the end of the top directory, when every target (the libraries, the
# examples) is known, whatever the order of the add_subdirectory calls.
function(cmdbus_deploy_tests)
  set(here ${PROJECT_SOURCE_DIR}/tests/deploy)

  # The worker the unit runs: the example's payments-worker when it is built
  # in this tree, else the tool's demo worker (same options).
  if(TARGET payments-worker)
    set(worker $<TARGET_FILE:payments-worker>)
    set(worker_args "")
  else()
    set(worker $<TARGET_FILE:cmdbus>)
    set(worker_args worker --demo)
  endif()
  add_test(NAME deploy.systemd_unit
    COMMAND ${here}/check_unit.sh ${PROJECT_SOURCE_DIR} ${worker} ${worker_args})

  # The programs and shared libraries a container image copies.
  set(binaries $<TARGET_FILE:cmdbus>)
  foreach(t cmdbus_client cmdbus_worker payments-worker)
    if(TARGET ${t})
      get_target_property(type ${t} TYPE)
      if(type STREQUAL "SHARED_LIBRARY" OR type STREQUAL "EXECUTABLE")
        list(APPEND binaries $<TARGET_FILE:${t}>)
      endif()
    endif()
  endforeach()
  add_test(NAME deploy.container_packages
    COMMAND ${here}/check_container.sh ${PROJECT_SOURCE_DIR}/deploy/Dockerfile ${binaries})

  set_tests_properties(deploy.systemd_unit deploy.container_packages
    PROPERTIES LABELS deploy TIMEOUT 60)
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL cmdbus_deploy_tests)
