# dlock --sem N (expirable permits, issue 31): each case of
# tests/cli/sem_test.sh is the ctest case "cli.<case>", run with the built
# dlock binary against a private redis-server. Label "tool".
if(TARGET dlock_cli)
  foreach(c sem_cap sem_kill9 sem_status sem_redis_gone)
    add_test(NAME cli.${c}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../cli/sem_test.sh
              $<TARGET_FILE:dlock_cli> ${PROJECT_SOURCE_DIR} ${c})
    set_tests_properties(cli.${c} PROPERTIES TIMEOUT 90 LABELS tool)
  endforeach()
endif()
