# dlock-bench smoke (issue 4): the benchmark runs end to end in quick mode on
# its own private redis-server, prints every target row and a JSON object
# that parses; correctness figures (lost updates, lost locks, scripts per
# pair) must be exact. No speed is asserted. Label "tool".
if(TARGET dlock-bench)
  find_program(DLOCK_PYTHON3 python3)
  if(DLOCK_PYTHON3)
    add_test(NAME bench.quick_smoke
      COMMAND ${DLOCK_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/bench/smoke.py
              $<TARGET_FILE:dlock-bench>)
    set_tests_properties(bench.quick_smoke PROPERTIES TIMEOUT 150 LABELS tool
      PROCESSORS 2) # CPU-bound: a whole core per side (Makefile CTEST_JOBS)
  endif()
endif()
