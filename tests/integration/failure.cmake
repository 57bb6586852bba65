# Failures (test_failure.c): a rank of four killed mid-stream (peer_death.sh).
# XTQ_PEER_TIMEOUT_MS=3000: on a loaded 2-core host (load average 10-20) a
# healthy rank can go unscheduled for about a second, and 1000 ms declared
# healthy peers down; the test's bound on detection scales with it
# (2 x timeout + 2 s), so it checks the same thing. A stalled initiator
# no longer blames its peers at all (peer_stall below).
add_executable(test_failure ${CMAKE_CURRENT_LIST_DIR}/test_failure.c)
target_compile_options(test_failure PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_failure PRIVATE xtq xtq_test_harness)

if(MPIEXEC_EXECUTABLE)
  foreach(prov shm tcp)
    add_test(NAME integration.peer_death.${prov}.np4
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/peer_death.sh ${prov}
                     $<TARGET_FILE:test_failure> ${XTQ_MPIRUN})
    set_tests_properties(integration.peer_death.${prov}.np4 PROPERTIES
                         LABELS integration TIMEOUT 180 RUN_SERIAL TRUE
                         ENVIRONMENT "XTQ_PEER_TIMEOUT_MS=3000;XTQ_FINALIZE_TIMEOUT_MS=2000")
    xtq_sanitizer_cases(LSAN integration.peer_death.${prov}.np4)
  endforeach()
endif()

# A rank stopped for 1.5 peer timeouts with puts in flight (a process
# starved on a loaded host) must not declare its healthy peer down; nor
# when its peer was stopped too and runs again a little later (_both). The
# stops scale with the timeout: 3 s, as above, leaves the child process
# about a second to be scheduled where 1 s left 300 ms.
if(MPIEXEC_EXECUTABLE)
  foreach(prov shm tcp)
    foreach(v "" both)
      set(name integration.peer_stall${v}.${prov}.np2)
      if(v)
        set(name integration.peer_stall_${v}.${prov}.np2)
      endif()
      xtq_add_mpi_case(NAME ${name} NP 2 PROVIDER ${prov} TIMEOUT 120
                       ENV XTQ_PEER_TIMEOUT_MS=3000
                       COMMAND $<TARGET_FILE:test_failure> peer_stall ${v})
      xtq_sanitizer_cases(LSAN ${name})
    endforeach()
  endforeach()
endif()

foreach(c unregister_inflight finalize_inflight)
  add_test(NAME integration.self.${c} COMMAND test_failure ${c})
  set_tests_properties(integration.self.${c} PROPERTIES LABELS integration TIMEOUT 120
                       SKIP_RETURN_CODE 77)
  xtq_sanitizer_cases(LSAN integration.self.${c})
endforeach()
