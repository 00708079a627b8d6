# The operator's commands of the dlock CLI (issue 27): dlock list, top and
# exporter, each case of tests/cli/obs_test.sh one ctest case "obs.<case>"
# against a private redis-server and real dlock holders. Label "tool".
# TIMEOUT is a hang guard, not a speed bound: make test-stress at load 25
# ran cli.handover_race 46 s and obs.list_json 92 s (ctest started them
# together, first, from the last run's costs).
if(TARGET dlock_cli)
  foreach(c list_json exporter top_plain kinds_and_force sem_named call_timeout manpage_markup)
    add_test(NAME obs.${c}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../cli/obs_test.sh
              $<TARGET_FILE:dlock_cli> ${PROJECT_SOURCE_DIR} ${c})
    set_tests_properties(obs.${c} PROPERTIES TIMEOUT 300 LABELS tool
      SKIP_RETURN_CODE 77)
  endforeach()
endif()
