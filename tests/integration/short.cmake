# Short tasks (XTQ_REGISTER_SHORT): run where they arrive when their queue
# is idle, through the queue in order otherwise (test_short.c), alone (puts
# to itself), with manual progress, at 2 ranks over shm and tcp, and with
# XTQ_CPU_INLINE_TASKS=0 (every task on a worker); and beside a running
# packet of the queue with XTQ_CPU_INLINE_TASKS=2 (beside). Label: integration; the
# shm cases also under TSan.
add_executable(test_short ${CMAKE_CURRENT_LIST_DIR}/test_short.c)
target_compile_options(test_short PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_short PRIVATE xtq xtq_test_harness)

set(short_tests)
# beside: XTQ_CPU_INLINE_TASKS=2, which the case sets itself (no .off).
foreach(c runs_here order_kept beside)
  add_test(NAME integration.short.self.${c} COMMAND test_short ${c})
  add_test(NAME integration.short.self.${c}.manual COMMAND test_short ${c} manual)
  list(APPEND short_tests integration.short.self.${c} integration.short.self.${c}.manual)
  if(NOT c STREQUAL "beside")
    add_test(NAME integration.short.self.${c}.off COMMAND test_short ${c})
    set_tests_properties(integration.short.self.${c}.off PROPERTIES ENVIRONMENT
                         XTQ_CPU_INLINE_TASKS=0)
    list(APPEND short_tests integration.short.self.${c}.off)
  endif()
  if(MPIEXEC_EXECUTABLE)
    foreach(prov shm tcp)
      xtq_add_mpi_case(NAME integration.short.${c}.${prov}.np2 NP 2 PROVIDER ${prov}
                       COMMAND $<TARGET_FILE:test_short> ${c})
    endforeach()
    xtq_add_mpi_case(NAME integration.short.${c}_manual.shm.np2 NP 2 PROVIDER shm
                     COMMAND $<TARGET_FILE:test_short> ${c} manual)
    list(APPEND short_tests integration.short.${c}.shm.np2 integration.short.${c}.tcp.np2
         integration.short.${c}_manual.shm.np2)
  endif()
endforeach()
foreach(t IN LISTS short_tests)
  if(t MATCHES "^integration\\.short\\.self\\.")
    set_property(TEST ${t} APPEND PROPERTY LABELS integration)
    set_property(TEST ${t} APPEND PROPERTY SKIP_RETURN_CODE 77)
    set_property(TEST ${t} APPEND PROPERTY TIMEOUT 300)
  endif()
  if(XTQ_SANITIZE STREQUAL "thread" AND NOT t MATCHES "tcp")
    set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${CMAKE_CURRENT_LIST_DIR}/tsan.supp")
  endif()
  if(XTQ_SANITIZE STREQUAL "address")
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp")
  endif()
endforeach()
