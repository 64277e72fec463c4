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
  if(TCP2RDMA_SANITIZER_FLAGS)
    target_compile_options(${target} PRIVATE ${TCP2RDMA_SANITIZER_FLAGS} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE ${TCP2RDMA_SANITIZER_FLAGS})
  endif()
endfunction()

# tcp2rdma_sanitizer_setup(): from TCP2RDMA_SANITIZE (empty, address or thread) sets
#   TCP2RDMA_SANITIZER_FLAGS  the compile and link flags every target gets;
#   TCP2RDMA_PRELOAD          what a test puts in LD_PRELOAD to run a program under the module. A
#                             sanitized module preloaded into an uninstrumented program (nc, python3)
#                             needs the sanitizer's runtime preloaded too. ASan's must lead the list.
#                             TSan's must follow the module: TSan's interceptor of a blocking call
#                             (epoll_wait, read, accept...) ignores every interceptor called inside
#                             it, so with TSan first, the module's wrappers ran inside them and their
#                             lock operations went unseen (57 false races in the stress test).
macro(tcp2rdma_sanitizer_setup)
  set(TCP2RDMA_PRELOAD "$<TARGET_FILE:tcp2rdma>")
  if(TCP2RDMA_SANITIZE STREQUAL "address")
    # UBSan's findings abort like ASan's, so that no report can go unnoticed in a passing test. Not
    # its vptr check: it needs a descriptor of its own (a pipe, to probe memory), and tests exhaust
    # the descriptors on purpose, which it reports as an "invalid vptr" in std::thread.
    set(TCP2RDMA_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined)
    set(runtime libasan.so)
  elseif(TCP2RDMA_SANITIZE STREQUAL "thread")
    set(TCP2RDMA_SANITIZER_FLAGS -fsanitize=thread)
    set(runtime libtsan.so)
  elseif(NOT TCP2RDMA_SANITIZE)  # empty or OFF
    set(TCP2RDMA_SANITIZER_FLAGS "")
  else()
    message(FATAL_ERROR "TCP2RDMA_SANITIZE='${TCP2RDMA_SANITIZE}': use address, thread or nothing")
  endif()
  if(TCP2RDMA_SANITIZER_FLAGS)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${runtime}
                    OUTPUT_VARIABLE runtime_path OUTPUT_STRIP_TRAILING_WHITESPACE)
    file(REAL_PATH "${runtime_path}" runtime_path)
    if(NOT EXISTS "${runtime_path}")
      message(FATAL_ERROR "the compiler's ${runtime} was not found (${runtime_path})")
    endif()
    if(TCP2RDMA_SANITIZE STREQUAL "thread")
      set(TCP2RDMA_PRELOAD "$<TARGET_FILE:tcp2rdma>:${runtime_path}")
    else()
      set(TCP2RDMA_PRELOAD "${runtime_path}:$<TARGET_FILE:tcp2rdma>")
    endif()
  endif()
endmacro()

# tcp2rdma_unit_test(<name> SOURCES ... [LIBS ...])
# A GoogleTest binary that runs on the host (no RDMA), label "unit"; each TEST() becomes a ctest test.
function(tcp2rdma_unit_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  tcp2rdma_target(${name})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  gtest_discover_tests(${name} TEST_PREFIX "${name}." PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endfunction()

# tcp2rdma_shim_env(<var> <rules file>)
# Sets <var> to the environment a VM test's command runs a program under the module with: the module
# preloaded (TCP2RDMA_PRELOAD), the rules file, and the log in the test's work directory, one file per
# guest (shim-a.log, shim-b.log), which the test then greps for the path each connection took.
function(tcp2rdma_shim_env var rules)
  set(${var} "LD_PRELOAD=${TCP2RDMA_PRELOAD} TCP2RDMA_RULES=${rules} TCP2RDMA_LOG=$T2R_WORK/shim-$T2R_HOST.log"
      PARENT_SCOPE)
endfunction()

# tcp2rdma_vm_test(<name> LABEL rdma|integration TOPOLOGY loop|pair COST s [TIMEOUT s]
#                  [SANITIZE | SANITIZE_WITH address|thread] [OWN_GUESTS]
#                  GUEST "shell" | GUEST_A "shell" GUEST_B "shell")
# Runs shell commands inside the Soft-RoCE testbed (integration/vm). In "loop" GUEST runs in one VM;
# in "pair" GUEST_A runs on host A (10.77.0.1) and GUEST_B on host B (10.77.0.2). The guest sees the
# host's filesystem read-only, so build outputs are reachable by their absolute paths. Each test takes
# one slot of the resource vm_loop or vm_pair (RESOURCE_GROUPS): with integration/testbed/
# vm-resources.json (test-all's ctest runs) one loop test and two pair tests may run at a time, each
# in a session of its own (under TCG a guest waiting on a timer leaves the cores to another).
# In a sanitized build (TCP2RDMA_SANITIZE) only the tests marked SANITIZE are registered (SANITIZE_WITH:
# only in the build of that sanitizer; the costliest tests run under one, docs/testbed.md), with the
# label "sanitize" too: each guest runs its command with the sanitizer's reports going to files in the
# work directory, and fails when there is any (integration/guest/sanitizer-reports), whatever the
# command's own status. Their timeouts grow with the sanitizer's slowdown.
# COST is what the test takes on the CI machine type, in seconds, run alone in a session (`ctest -R`
# with TCP2RDMA_VM_SESSIONS=1): the suite has a budget, and testbed.vm_budget fails when the declared
# costs add up to more (docs/testbed.md, "What a run costs"). A test runs in the session of guests test-all keeps booted
# for its topology, on guests left as a fresh boot leaves them; OWN_GUESTS boots guests for it alone
# (a test that powers a guest off).
function(tcp2rdma_vm_test name)
  if(NOT TCP2RDMA_VM_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "SANITIZE;OWN_GUESTS" "LABEL;TOPOLOGY;COST;TIMEOUT;SANITIZE_WITH;GUEST;GUEST_A;GUEST_B"
                        "" ${ARGN})
  if(ARG_SANITIZE_WITH AND NOT ARG_SANITIZE_WITH MATCHES "^(address|thread)$")
    message(FATAL_ERROR "tcp2rdma_vm_test(${name}): SANITIZE_WITH takes address or thread")
  endif()
  if(TCP2RDMA_SANITIZER_FLAGS AND NOT ARG_SANITIZE AND NOT ARG_SANITIZE_WITH STREQUAL TCP2RDMA_SANITIZE)
    return()
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    # A ';' inside a GUEST string splits it into a CMake list; the tail would be dropped silently.
    message(FATAL_ERROR "tcp2rdma_vm_test(${name}): stray arguments '${ARG_UNPARSED_ARGUMENTS}' "
                        "(a ';' in a GUEST string? join commands with && or || or newlines)")
  endif()
  if(NOT ARG_COST MATCHES "^[0-9]+$")
    message(FATAL_ERROR "tcp2rdma_vm_test(${name}): COST <seconds> is missing: declare what the test "
                        "takes in a test-all run (build/test-all.tests; docs/testbed.md, 'What a run costs')")
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  # The programs the guests run, built by the target vm_test_programs (a sanitized build's VM tests
  # need only these and the module: integration/test-all builds no more of it).
  string(REGEX MATCHALL "\\$<TARGET_FILE:[A-Za-z0-9_]+>" programs "${ARG_GUEST}${ARG_GUEST_A}${ARG_GUEST_B}")
  list(TRANSFORM programs REPLACE "^\\$<TARGET_FILE:([A-Za-z0-9_]+)>$" "\\1")
  set_property(GLOBAL APPEND PROPERTY TCP2RDMA_VM_PROGRAMS tcp2rdma ${programs})
  set(labels ${ARG_LABEL} vm_${ARG_TOPOLOGY})  # vm_loop or vm_pair: test-all runs each group in one session
  set(vm_options "")  # not a caller's variable of the same name (a function sees its caller's scope)
  if(TCP2RDMA_SANITIZER_FLAGS)
    if(TCP2RDMA_SANITIZE STREQUAL "thread")
      math(EXPR ARG_TIMEOUT "4 * ${ARG_TIMEOUT}")
    else()
      math(EXPR ARG_TIMEOUT "2 * ${ARG_TIMEOUT}")
    endif()
    foreach(part GUEST GUEST_A GUEST_B)
      if(ARG_${part})
        tcp2rdma_sanitized_guest(ARG_${part} "${ARG_${part}}")
      endif()
    endforeach()
    list(APPEND labels sanitize)
    list(APPEND vm_options --mem 3072)  # shadow memory, redzones and quarantine: 1 GiB runs out in the stress test
  endif()
  set(vm ${PROJECT_SOURCE_DIR}/integration/vm)
  set(work ${PROJECT_BINARY_DIR}/vm-work/${name})
  list(APPEND vm_options --share ${PROJECT_BINARY_DIR})  # the guest sees it wherever it lies (docs/testbed.md)
  if(NOT ARG_OWN_GUESTS)
    list(APPEND vm_options --session)  # guests kept booted from test to test (TCP2RDMA_VM_SESSIONS=1)
  endif()
  if(ARG_TOPOLOGY STREQUAL "loop")
    add_test(NAME ${name} COMMAND ${vm} loop --timeout ${ARG_TIMEOUT} --work ${work} ${vm_options} ${ARG_GUEST})
  elseif(ARG_TOPOLOGY STREQUAL "pair")
    add_test(NAME ${name}
             COMMAND ${vm} pair --timeout ${ARG_TIMEOUT} --work ${work} ${vm_options} ${ARG_GUEST_A} ${ARG_GUEST_B})
  else()
    message(FATAL_ERROR "tcp2rdma_vm_test(${name}): TOPOLOGY must be loop or pair")
  endif()
  # A pair whose virtual wire stalls runs once more (integration/vm, docs/testbed.md).
  if(ARG_TOPOLOGY STREQUAL "pair")
    math(EXPR ctest_timeout "2 * ${ARG_TIMEOUT} + 90")
  else()
    math(EXPR ctest_timeout "${ARG_TIMEOUT} + 90")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" RESOURCE_GROUPS vm_${ARG_TOPOLOGY}:1
                                          TIMEOUT ${ctest_timeout})
  tcp2rdma_vm_cost(${name} ${ARG_COST})
endfunction()

# tcp2rdma_vm_cost(<test> <seconds>): a VM test's declared cost, counted against the suite's budget
# (the plain build's; a sanitized build runs few of them, each slower: docs/testbed.md).
function(tcp2rdma_vm_cost test seconds)
  set_tests_properties(${test} PROPERTIES COST ${seconds})
  if(NOT TCP2RDMA_SANITIZER_FLAGS)
    set_property(GLOBAL APPEND PROPERTY TCP2RDMA_VM_COSTS "${seconds} ${test}")
  endif()
endfunction()

# tcp2rdma_sanitized_guest(<out-var> "shell"): the guest command with every sanitizer's reports sent to
# $T2R_WORK/sanitizer-<host>.<pid> (a report on stderr could be swallowed by a redirection or by an
# application that closes it), then checked: any report fails the guest.
function(tcp2rdma_sanitized_guest out command)
  set(reports "log_path=$T2R_WORK/sanitizer-$T2R_HOST")
  set(${out} "export ASAN_OPTIONS=${reports}:detect_leaks=1 UBSAN_OPTIONS=${reports}:print_stacktrace=1:halt_on_error=1 TSAN_OPTIONS=${reports}:die_after_fork=0:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/integration/guest/tsan-suppressions
(
${command}
)
status=$?
sh ${PROJECT_SOURCE_DIR}/integration/guest/sanitizer-reports || status=1
exit $status" PARENT_SCOPE)
endfunction()

# tcp2rdma_vm_tests_done(): after every VM test is registered: the target vm_test_programs, which
# builds what they run, and the check testbed.vm_budget of their declared costs against the budget.
function(tcp2rdma_vm_tests_done)
  get_property(programs GLOBAL PROPERTY TCP2RDMA_VM_PROGRAMS)
  list(REMOVE_DUPLICATES programs)
  add_custom_target(vm_test_programs)
  if(programs)
    add_dependencies(vm_test_programs ${programs})
  endif()
  get_property(costs GLOBAL PROPERTY TCP2RDMA_VM_COSTS)
  if(costs)
    list(JOIN costs "\n" lines)
    file(WRITE ${PROJECT_BINARY_DIR}/vm-test-costs.txt "${lines}\n")
    add_test(NAME testbed.vm_budget
             COMMAND ${PROJECT_SOURCE_DIR}/tests/testbed/vm_budget.sh ${PROJECT_BINARY_DIR}/vm-test-costs.txt
                     ${TCP2RDMA_VM_BUDGET_S})
    set_tests_properties(testbed.vm_budget PROPERTIES LABELS unit)
  endif()
endfunction()
