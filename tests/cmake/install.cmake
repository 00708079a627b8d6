add_test(NAME install.consumer
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/consumer_check.sh
          ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(install.consumer PROPERTIES TIMEOUT 120 LABELS tool)
# examples/ as a consumer project of the installed package (issue 39).
add_test(NAME install.examples
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/examples_check.sh
          ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(install.examples PROPERTIES TIMEOUT 180 LABELS tool)
