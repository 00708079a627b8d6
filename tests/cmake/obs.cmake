# The operator's commands of the dlock CLI (issue 27): dlock list, top and
# exporter, each case of tests/cli/obs_test.sh one ctest case "obs.<case>"
# against a private redis-server and real dlock holders. Label "tool".
if(TARGET dlock_cli)
  foreach(c list_json exporter top_plain kinds_and_force sem_named call_timeout manpage_markup)
    add_test(NAME obs.${c}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../cli/obs_test.sh
              $<TARGET_FILE:dlock_cli> ${PROJECT_SOURCE_DIR} ${c})
    set_tests_properties(obs.${c} PROPERTIES TIMEOUT 120 LABELS tool
      SKIP_RETURN_CODE 77)
  endforeach()
endif()
