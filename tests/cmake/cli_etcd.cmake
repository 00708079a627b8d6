# dlock -u etcd://... (the etcd store, issue 42): each case of
# tests/cli/etcd_test.sh is the ctest case "cli.<case>", run with the built
# dlock binary against a private etcd member (skipped, 77, without etcd).
# Labels "tool etcd".
if(TARGET dlock_cli)
  foreach(c etcd_run etcd_fence etcd_sem etcd_admin etcd_bad)
    add_test(NAME cli.${c}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../cli/etcd_test.sh
              $<TARGET_FILE:dlock_cli> ${PROJECT_SOURCE_DIR} ${c})
    set_tests_properties(cli.${c} PROPERTIES TIMEOUT 120 LABELS "tool;etcd"
      SKIP_RETURN_CODE 77)
  endforeach()
endif()
