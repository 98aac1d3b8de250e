# Target helpers: one library per folder, tests beside the code, binaries in
# build/bin. Every target compiles with -Wall -Wextra -Werror.

set(YARD_WARNINGS -Wall -Wextra -Werror)

# Under YARD_TSAN, what absl's locks order, told to ThreadSanitizer
# (common/tsan_absl_sync.cc).
function(yard_tsan_sync NAME)
  if(YARD_TSAN)
    target_link_libraries(${NAME} PRIVATE yard_tsan_absl_sync)
  endif()
endfunction()

# yard_cc_library(NAME SRCS ... DEPS ... PRIVATE_DEPS ...)
function(yard_cc_library NAME)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${NAME} STATIC ${ARG_SRCS})
  target_include_directories(${NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${YARD_WARNINGS}>)
  target_link_libraries(${NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# yard_cc_binary(NAME SRCS ... DEPS ...): lands in build/bin.
function(yard_cc_binary NAME)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${NAME} ${ARG_SRCS})
  target_include_directories(${NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${NAME} PRIVATE ${YARD_WARNINGS})
  target_link_libraries(${NAME} PRIVATE ${ARG_DEPS})
  yard_tsan_sync(${NAME})
endfunction()

# The emulated CUDA kernels spread their blocks over up to 4 threads, one
# a core (engine/cuda/emulation/launch.h): ctest counts an emulation test
# as that many processors, so under `ctest -j <cores>` it never shares the
# cores with a test whose cluster keeps time (leases, heartbeats).
cmake_host_system_information(RESULT _yard_cores QUERY NUMBER_OF_LOGICAL_CORES)
if(_yard_cores GREATER 4)
  set(YARD_EMULATION_PROCESSORS 4)
else()
  set(YARD_EMULATION_PROCESSORS ${_yard_cores})
endif()

# yard_cc_test(NAME SRCS ... DEPS ... LABELS ... TIMEOUT n)
function(yard_cc_test NAME)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${NAME} ${ARG_SRCS})
  set_target_properties(${NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(${NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${NAME} PRIVATE ${YARD_WARNINGS})
  target_link_libraries(${NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock
                        GTest::gtest_main)
  yard_tsan_sync(${NAME})
  add_test(NAME ${NAME} COMMAND ${NAME})
  # Each test's scratch files (gtest's TempDir(), tests/cluster.h) in a
  # folder of its own and of this build tree's, so two trees' test runs on
  # one machine (a checkout and a CI clone, say) never share one.
  string(MD5 _yard_tree "${CMAKE_BINARY_DIR}")
  string(SUBSTRING "${_yard_tree}" 0 8 _yard_tree)
  set(_yard_tmp "/tmp/yt-${_yard_tree}/${NAME}")
  file(MAKE_DIRECTORY "${_yard_tmp}")
  # The scale also stretches the deadlines tests set themselves (Scaled()
  # in tests/cluster.h).
  set(_yard_env "TEST_TMPDIR=${_yard_tmp}")
  if(NOT YARD_TEST_TIMEOUT_SCALE EQUAL 1)
    list(APPEND _yard_env "YARD_TEST_TIMEOUT_SCALE=${YARD_TEST_TIMEOUT_SCALE}")
  endif()
  set_tests_properties(${NAME} PROPERTIES ENVIRONMENT "${_yard_env}")
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * ${YARD_TEST_TIMEOUT_SCALE}")
  set_tests_properties(${NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS)
    set_tests_properties(${NAME} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  if("emulation" IN_LIST ARG_LABELS)
    set_tests_properties(${NAME} PROPERTIES PROCESSORS
                         ${YARD_EMULATION_PROCESSORS})
  endif()
  # A GPU test with no device calls GTEST_SKIP; let ctest count it as
  # skipped rather than passed.
  if("gpu" IN_LIST ARG_LABELS)
    set_tests_properties(${NAME} PROPERTIES SKIP_REGULAR_EXPRESSION
                         "\\[  SKIPPED \\]")
  endif()
endfunction()
