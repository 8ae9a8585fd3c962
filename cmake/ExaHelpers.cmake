# exa_cc_library / exa_cc_binary / exa_cc_test: one target per module, dependencies declared.
# The target graph is the architecture (docs/architecture.md#module-map): a module may only use what it names in
# DEPS, and CMake refuses cycles between static libraries we declare this way. Which modules a
# module may name is scripts/module-layers.txt, checked by scripts/check-layers.py.

set(EXA_WARNING_FLAGS -Wall -Wextra -Werror -Wno-unused-parameter -Wnon-virtual-dtor
    -Wno-missing-field-initializers ${EXA_SANITIZER_WARNING_FLAGS})

# exa_cc_library(NAME router SRCS a.cc b.cc DEPS exa::cluster absl::status)
function(exa_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;HDRS;DEPS;PRIVATE_DEPS" ${ARGN})
  set(target exa_${ARG_NAME})
  if(ARG_SRCS)
    add_library(${target} STATIC ${ARG_SRCS} ${ARG_HDRS})
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${EXA_WARNING_FLAGS}>)
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
  endif()
  add_library(exa::${ARG_NAME} ALIAS ${target})
endfunction()

# exa_cc_binary(NAME exaserved SRCS main.cc DEPS exa::daemon)
function(exa_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
  target_compile_options(${ARG_NAME} PRIVATE ${EXA_WARNING_FLAGS})
endfunction()

# exa_cc_test(NAME common_units SRCS units_test.cc DEPS exa::common [LABELS unit] [TIMEOUT s]
#             [ARGS ...] [DEFINES NAME=value ...] [OWN_MAIN] [SKIP_RETURN_CODE n])
# Each test binary is a Catch2 program registered as one ctest test; LABELS select subsets
# (`ctest -L unit`, `-LE slow`). OWN_MAIN: the sources bring their own main() (e.g. one that exits
# SKIP_RETURN_CODE, which ctest reports as skipped, when there is no GPU).
function(exa_cc_test)
  cmake_parse_arguments(ARG "OWN_MAIN" "NAME;TIMEOUT;SKIP_RETURN_CODE" "SRCS;DEPS;LABELS;ARGS;DEFINES"
                        ${ARGN})
  set(target test_${ARG_NAME})
  add_executable(${target} ${ARG_SRCS})
  if(ARG_OWN_MAIN)
    target_link_libraries(${target} PRIVATE ${ARG_DEPS} Catch2::Catch2)
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/test)
  else()
    target_link_libraries(${target} PRIVATE ${ARG_DEPS} exa_catch2_main)
  endif()
  target_compile_options(${target} PRIVATE ${EXA_WARNING_FLAGS})
  if(ARG_DEFINES)
    target_compile_definitions(${target} PRIVATE ${ARG_DEFINES})
  endif()
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-bin)
  add_test(NAME ${ARG_NAME} COMMAND ${target} ${ARG_ARGS})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
  if(DEFINED ARG_SKIP_RETURN_CODE)
    set_tests_properties(${ARG_NAME} PROPERTIES SKIP_RETURN_CODE ${ARG_SKIP_RETURN_CODE})
  endif()
endfunction()
