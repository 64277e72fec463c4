# Helpers every target in the tree goes through, so flags live in one place and stay per target.

# tcp2rdma_target(<target>): C++20, hidden visibility, PIC, warnings, and the sanitizers when asked.
function(tcp2rdma_target target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES
    CXX_EXTENSIONS OFF
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wcast-align -Wnull-dereference -Wformat=2)
  if(TCP2RDMA_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(TCP2RDMA_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# tcp2rdma_unit_test(<name> SOURCES ... [LIBS ...])
# A GoogleTest binary that runs on the host (no RDMA), label "unit"; each TEST() becomes a ctest test.
function(tcp2rdma_unit_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  tcp2rdma_target(${name})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  gtest_discover_tests(${name} TEST_PREFIX "${name}." PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endfunction()

# tcp2rdma_vm_test(<name> LABEL rdma|integration TOPOLOGY loop|pair [TIMEOUT s]
#                  GUEST "shell" | GUEST_A "shell" GUEST_B "shell")
# Runs shell commands inside the Soft-RoCE testbed (integration/vm). In "loop" GUEST runs in one VM;
# in "pair" GUEST_A runs on host A (10.77.0.1) and GUEST_B on host B (10.77.0.2). The guest sees the
# host's filesystem read-only, so build outputs are reachable by their absolute paths. VM tests share
# the two cores, so they never run at the same time (RESOURCE_LOCK).
function(tcp2rdma_vm_test name)
  if(NOT TCP2RDMA_VM_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "LABEL;TOPOLOGY;TIMEOUT;GUEST;GUEST_A;GUEST_B" "" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    # A ';' inside a GUEST string splits it into a CMake list; the tail would be dropped silently.
    message(FATAL_ERROR "tcp2rdma_vm_test(${name}): stray arguments '${ARG_UNPARSED_ARGUMENTS}' "
                        "(a ';' in a GUEST string? join commands with && or || or newlines)")
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set(vm ${PROJECT_SOURCE_DIR}/integration/vm)
  set(work ${PROJECT_BINARY_DIR}/vm-work/${name})
  if(ARG_TOPOLOGY STREQUAL "loop")
    add_test(NAME ${name} COMMAND ${vm} loop --timeout ${ARG_TIMEOUT} --work ${work} ${ARG_GUEST})
  elseif(ARG_TOPOLOGY STREQUAL "pair")
    add_test(NAME ${name}
             COMMAND ${vm} pair --timeout ${ARG_TIMEOUT} --work ${work} ${ARG_GUEST_A} ${ARG_GUEST_B})
  else()
    message(FATAL_ERROR "tcp2rdma_vm_test(${name}): TOPOLOGY must be loop or pair")
  endif()
  # A pair whose virtual wire stalls runs once more (integration/vm, docs/testbed.md).
  if(ARG_TOPOLOGY STREQUAL "pair")
    math(EXPR ctest_timeout "2 * ${ARG_TIMEOUT} + 90")
  else()
    math(EXPR ctest_timeout "${ARG_TIMEOUT} + 90")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS ${ARG_LABEL} RESOURCE_LOCK softroce_vm
                                          TIMEOUT ${ctest_timeout})
endfunction()
