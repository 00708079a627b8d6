# The issue's Bar, checked from outside: a program that includes only
# <dlock.h> and links only the library target (whose public include dir is
# include/; no src/, no hiredis headers, no test harness), run against a
# redis-server it starts itself. See tests/external/external_check.c.
add_executable(external_check
  ${CMAKE_CURRENT_SOURCE_DIR}/external/external_check.c)
target_link_libraries(external_check PRIVATE dlock)
add_test(NAME external.check
  COMMAND ${DLOCK_TEST_PREFIX} $<TARGET_FILE:external_check>)
set_tests_properties(external.check PROPERTIES TIMEOUT 120 LABELS unit)
