# dlock -v and status's connection name (issue 27): cases of
# tests/cli/cli_test.sh, registered like tests/cmake/cli.cmake's.
if(TARGET dlock_cli)
  foreach(c verbose_events)
    add_test(NAME cli.${c}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../cli/cli_test.sh
              $<TARGET_FILE:dlock_cli> ${PROJECT_SOURCE_DIR} ${c}
              ${CMAKE_BINARY_DIR})
    set_tests_properties(cli.${c} PROPERTIES TIMEOUT 180 LABELS tool)
  endforeach()
endif()
