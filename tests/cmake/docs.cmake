# Docs that must match the code: docs/errors.md's table against the error
# codes of include/dlock.h.
find_program(DLOCK_PYTHON3_DOCS python3)
if(DLOCK_PYTHON3_DOCS)
  add_test(NAME docs.errors_table
    COMMAND ${DLOCK_PYTHON3_DOCS}
            ${CMAKE_CURRENT_LIST_DIR}/../docs/errors_table_check.py
            ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs.errors_table PROPERTIES TIMEOUT 30 LABELS tool)
endif()
# docs/guarantees.md: every test it names as the proof of a line exists.
if(DLOCK_PYTHON3_DOCS)
  add_test(NAME docs.guarantees_tests
    COMMAND ${DLOCK_PYTHON3_DOCS}
            ${CMAKE_CURRENT_LIST_DIR}/../docs/guarantees_check.py
            ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs.guarantees_tests PROPERTIES TIMEOUT 30 LABELS tool)
endif()
# The construction rules of docs/guarantees.md, searched for in src/ by a
# machine: each is enforced in one place, and nothing bypasses it.
if(DLOCK_PYTHON3_DOCS)
  add_test(NAME docs.rules
    COMMAND ${DLOCK_PYTHON3_DOCS}
            ${CMAKE_CURRENT_LIST_DIR}/../docs/rules_check.py
            ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs.rules PROPERTIES TIMEOUT 30 LABELS tool)
endif()
# The layout rules of the brief (function lengths in src/ and tools/, each
# src/ file opening with what it owns), checked by a machine.
if(DLOCK_PYTHON3_DOCS)
  add_test(NAME docs.layout
    COMMAND ${DLOCK_PYTHON3_DOCS}
            ${CMAKE_CURRENT_LIST_DIR}/../docs/layout_check.py
            ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs.layout PROPERTIES TIMEOUT 60 LABELS tool)
endif()
# The layers of src/ (docs/design.md, "The layers of src/"): no file
# includes a header of a higher or a sibling layer, except the arrows
# tests/docs/layers_allow.txt names (a list that only shrinks).
if(DLOCK_PYTHON3_DOCS)
  add_test(NAME docs.layers
    COMMAND ${DLOCK_PYTHON3_DOCS}
            ${CMAKE_CURRENT_LIST_DIR}/../docs/layers_check.py
            ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs.layers PROPERTIES TIMEOUT 30 LABELS tool)
endif()
