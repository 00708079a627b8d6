# dlock CLI scenarios (issue 5): each case of tests/cli/cli_test.sh is one
# ctest case "cli.<case>", run with the built dlock binary against a private
# redis-server the script starts. Label "tool".
# TIMEOUT is a hang guard, not a speed bound: make test-stress at load 25
# ran cli.handover_race 46 s and obs.list_json 92 s (ctest started them
# together, first, from the last run's costs).
if(TARGET dlock_cli)
  set(DLOCK_CLI_CASES
    interleave nonblock wait_timeout exit_code
    signal_TERM signal_INT signal_HUP kill_after watchdog key_deleted
    release_loss lease kill9 redis_gone signal_waiting env status
    status_fair force_unlock bad_input errors help manpage install fence shared fair
    kinds
    handover_race status_json_bytes emfile config config_errors tls_flags
    tls_server habits versions config_redisson lost_before_start)
  # 180 s on a plain build; slow builds (TSan: cli.fair took 42 s on its
  # own on a loaded machine) by the build's multiplier.
  math(EXPR cli_timeout "180 * ${DLOCK_TEST_TIMEOUT_MULT}")
  foreach(c ${DLOCK_CLI_CASES})
    add_test(NAME cli.${c}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../cli/cli_test.sh
              $<TARGET_FILE:dlock_cli> ${PROJECT_SOURCE_DIR} ${c}
              ${CMAKE_BINARY_DIR})
    set_tests_properties(cli.${c} PROPERTIES TIMEOUT ${cli_timeout} LABELS tool)
  endforeach()
endif()
