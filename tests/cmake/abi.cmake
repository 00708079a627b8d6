# The ABI can grow without breaking older programs (docs/abi.md):
#
# abi.consumer_<version>: tests/abi/consumer.c, an outside program, built
#   against each SAVED release header tests/abi/<version>/dlock.h (include
#   order puts it before include/) and linked with this tree's library, run
#   against a private redis-server. It must run correctly -- never write or
#   read past its structs (guard bytes; ASan in the ASan build). A release
#   saves its header there, so every later change is checked against it.
# abi.consumer_current: the same program against include/dlock.h.
# abi.layout: an ABI dump comparison -- the struct layouts and error codes
#   a program bakes in, of include/ against every saved release of the same
#   ABI generation (tests/abi/check_layout.py).
# abi.api: SONAME = libdlock.so.<DLOCK_SOVERSION>; every call of every saved
#   header and of include/ exported, nothing else; every call DLOCK_SINCE-
#   tagged consistently with the saved releases (tests/abi/check_api.py).
file(GLOB DLOCK_ABI_SAVED CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/abi/*/dlock.h)
set(_abi_variants current)
foreach(h ${DLOCK_ABI_SAVED})
  get_filename_component(_dir ${h} DIRECTORY)
  get_filename_component(_ver ${_dir} NAME)
  list(APPEND _abi_variants ${_ver})
endforeach()
foreach(v ${_abi_variants})
  string(REPLACE "." "_" _t abi_consumer_${v})
  add_executable(${_t} ${CMAKE_CURRENT_SOURCE_DIR}/abi/consumer.c)
  if(NOT v STREQUAL "current")
    # Before include/ (which the dlock target adds): <dlock.h> is the saved
    # one, and its "dlock/version.h" the one saved beside it.
    target_include_directories(${_t} BEFORE PRIVATE
      ${CMAKE_CURRENT_SOURCE_DIR}/abi/${v})
  endif()
  target_link_libraries(${_t} PRIVATE dlock)
  add_test(NAME abi.consumer_${v}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/abi/run_consumer.sh
            $<TARGET_FILE:${_t}> ${DLOCK_TEST_PREFIX})
  set_tests_properties(abi.consumer_${v} PROPERTIES TIMEOUT 90 LABELS unit)
endforeach()
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME abi.api
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/abi/check_api.py
            $<TARGET_FILE:dlock> ${PROJECT_SOURCE_DIR})
  set_tests_properties(abi.api PROPERTIES TIMEOUT 60 LABELS tool)
  add_test(NAME abi.layout
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/abi/check_layout.py
            ${CMAKE_C_COMPILER} ${PROJECT_SOURCE_DIR})
  set_tests_properties(abi.layout PROPERTIES TIMEOUT 60 LABELS tool)
endif()
