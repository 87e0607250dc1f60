# hetflow_add_test(NAME SOURCES a.cpp b.cpp LIBS x y LABELS unit [TIMEOUT s])
# Builds one Boost.Test executable (dynamic Boost.Test; the file that defines
# BOOST_TEST_MODULE is the suite's main) and registers it with CTest.
function(hetflow_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} Boost::unit_test_framework)
  target_compile_definitions(${name} PRIVATE BOOST_TEST_DYN_LINK)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-bin)
  add_test(NAME ${name} COMMAND ${name} --color_output=no --log_level=test_suite --report_level=short)
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()

# hetflow_add_script_test(NAME SCRIPT path LABELS integration [TIMEOUT s])
# A multi-process test driven by a bash script. The script gets the hetflow
# binary, the source dir and a scratch dir as environment variables.
function(hetflow_add_script_test name)
  cmake_parse_arguments(T "" "SCRIPT;TIMEOUT" "LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS integration)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND bash ${T_SCRIPT})
  # Script tests start nodes on fixed local ports, and the scripts' ranges
  # overlap (preprocess_run and train_dp both use 7900-7960): one at a time,
  # even under `ctest -j` (a -j2 run saw it_preprocess_run fail).
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} RESOURCE_LOCK hetflow_node_ports
    ENVIRONMENT "HETFLOW=$<TARGET_FILE:hetflow>;HETFLOW_SRC=${PROJECT_SOURCE_DIR};HETFLOW_SCRATCH=${CMAKE_BINARY_DIR}/test-scratch/${name}")
endfunction()
