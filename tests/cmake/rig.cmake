# dlock-stockd and dlock-rig (issue 16): each case of tests/rig/rig_test.py
# is one ctest case "rig.<case>", run with the built tools. Real parts: a
# private redis-server, nginx, ab, headless Chromium (rig_serve_clicks,
# driven by tools/rig/headless.py; skipped with a SKIP line when Chromium
# is not installed). Label "tool".
if(TARGET dlock-stockd AND TARGET dlock-rig)
  find_program(DLOCK_PYTHON3 python3)
  if(DLOCK_PYTHON3)
    foreach(c stockd_endpoints stockd_malformed stockd_slow_clients stockd_health
              stockd_lock_lost rig_access_log rig_switch_waits_for_old_workers
              rig_quick rig_interrupted rig_serve_clicks)
      add_test(NAME rig.${c}
        COMMAND ${DLOCK_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/../rig/rig_test.py
                ${c} --rig ${PROJECT_BINARY_DIR}/tools/rig/dlock-rig
                --stockd $<TARGET_FILE:dlock-stockd>
                --headless ${PROJECT_SOURCE_DIR}/tools/rig/headless.py)
      set_tests_properties(rig.${c} PROPERTIES TIMEOUT 150 LABELS tool
        SKIP_RETURN_CODE 77 PROCESSORS 2) # nginx, ab, Chromium: CPU-bound
    endforeach()
  endif()
endif()
