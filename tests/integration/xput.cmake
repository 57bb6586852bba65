# Extended puts (test_xput.c: xtq_putv, counters, xtq_flush, destroy while
# a task is in flight) at 2 and 4 ranks over shm and tcp and alone; and the
# engine under injected faults (test_faults.c, white-box). Label:
# integration.
add_executable(test_xput ${CMAKE_CURRENT_LIST_DIR}/test_xput.c)
target_compile_options(test_xput PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_xput PRIVATE xtq xtq_test_harness)

add_executable(test_faults ${CMAKE_CURRENT_LIST_DIR}/test_faults.c)
target_compile_options(test_faults PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_faults PRIVATE xtq_internal xtq_test_harness)

set(xput_self putv_args putv_pieces counter_many flush_load flush_timeout destroy_in_flight
    results results_args triggers_chain trigger_never_fires triggers_misc payload_echo
    trigger_cancel)
foreach(c IN LISTS xput_self)
  add_test(NAME integration.xput.self.${c} COMMAND test_xput ${c})
  set_tests_properties(integration.xput.self.${c} PROPERTIES LABELS integration TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()
foreach(c flush_load flush_timeout destroy_in_flight results triggers_chain triggers_misc
          trigger_cancel)
  add_test(NAME integration.xput.self.${c}.manual COMMAND test_xput ${c} manual)
  set_tests_properties(integration.xput.self.${c}.manual PROPERTIES LABELS integration
                       TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()

set(faults_self put_error_no_comp result_alloc_fails ack_send_retried ack_lost_reasked
    put_lost_resent flush_lone_waiter)
foreach(c IN LISTS faults_self)
  add_test(NAME integration.faults.self.${c} COMMAND test_faults ${c})
  set_tests_properties(integration.faults.self.${c} PROPERTIES LABELS integration TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()

if(MPIEXEC_EXECUTABLE)
  foreach(prov shm tcp)
    foreach(c putv_pieces counter_many flush_load flush_timeout results triggers_chain
              trigger_never_fires triggers_misc payload_echo trigger_cancel)
      xtq_add_mpi_case(NAME integration.xput.${c}.${prov}.np2 NP 2 PROVIDER ${prov}
                       COMMAND $<TARGET_FILE:test_xput> ${c})
    endforeach()
    foreach(c counter_many flush_load results triggers_chain)
      xtq_add_mpi_case(NAME integration.xput.${c}.${prov}.np4 NP 4 PROVIDER ${prov}
                       COMMAND $<TARGET_FILE:test_xput> ${c})
    endforeach()
  endforeach()
  # The progress thread alone on the endpoint (XTQ_ENDPOINT_OWNER=progress):
  # puts wait in its send queue, so a command reused at once (counter_many
  # builds each on the stack) must have been copied at the call.
  foreach(c counter_many results triggers_chain trigger_cancel payload_echo)
    xtq_add_mpi_case(NAME integration.xput.${c}.owner_progress.tcp.np2 NP 2 PROVIDER tcp
                     ENV XTQ_ENDPOINT_OWNER=progress
                     COMMAND $<TARGET_FILE:test_xput> ${c})
  endforeach()
  foreach(prov shm tcp)
    xtq_add_mpi_case(NAME integration.faults.control_space.${prov}.np2 NP 2 PROVIDER ${prov}
                     COMMAND $<TARGET_FILE:test_faults> control_space)
  endforeach()
  foreach(c flush_load triggers_chain)
    xtq_add_mpi_case(NAME integration.xput.${c}_manual.shm.np2 NP 2 PROVIDER shm
                     COMMAND $<TARGET_FILE:test_xput> ${c} manual)
  endforeach()
endif()

xtq_sanitizer_cases(LSAN_REGEX "^integration\\.(xput|faults)\\.")

# Under TSan: counters, flush and putv through the engine, alone.
if(XTQ_SANITIZE STREQUAL "thread")
  foreach(t integration.xput.self.counter_many integration.xput.self.flush_load
            integration.xput.self.putv_pieces)
    set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT XTQ_IT_PUTS=500
                 "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${CMAKE_CURRENT_LIST_DIR}/tsan.supp")
  endforeach()
endif()

# A region libfabric's shm left behind by a killed process whose pid we now
# have (the shm EBUSY at xtq_init seen in CI): the engine removes it and
# opens its endpoint. exec keeps the shell's pid for the test.
add_test(NAME integration.xput.self.shm_stale_region
         COMMAND bash -c "touch /dev/shm/$$:0:0 && exec \"$0\" putv_args" $<TARGET_FILE:test_xput>)
set_tests_properties(integration.xput.self.shm_stale_region PROPERTIES LABELS integration TIMEOUT 120)
