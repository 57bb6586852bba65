# XTQ_ENDPOINT_OWNER=progress (only the progress thread uses the endpoint;
# puts, acks and reposts are queued for it): the stress, manual-progress and
# multi-threaded cases again in that mode, also under TSan.
if(MPIEXEC_EXECUTABLE)
  foreach(prov shm tcp)
    xtq_add_mpi_case(NAME integration.owner.stress.${prov}.np2 NP 2 PROVIDER ${prov}
                     ENV XTQ_ENDPOINT_OWNER=progress
                     COMMAND $<TARGET_FILE:test_integration> stress)
  endforeach()
  xtq_add_mpi_case(NAME integration.owner.threads.shm.np2 NP 2 PROVIDER shm TIMEOUT 120
                   ENV XTQ_ENDPOINT_OWNER=progress
                   COMMAND $<TARGET_FILE:test_stress> threads 5000)
  xtq_add_mpi_case(NAME integration.owner.bad_nokernel.tcp.np2 NP 2 PROVIDER tcp
                   ENV XTQ_ENDPOINT_OWNER=progress
                   COMMAND $<TARGET_FILE:test_integration> bad_nokernel)
endif()
foreach(c stress_manual window_nonblocking)
  string(REPLACE "_manual" " manual" args ${c})
  separate_arguments(args)
  add_test(NAME integration.owner.self.${c} COMMAND test_integration ${args})
  set_tests_properties(integration.owner.self.${c} PROPERTIES LABELS integration TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT XTQ_ENDPOINT_OWNER=progress)
endforeach()
add_test(NAME integration.owner.self.threads COMMAND test_stress threads 5000)
set_tests_properties(integration.owner.self.threads PROPERTIES LABELS integration TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT XTQ_ENDPOINT_OWNER=progress)
foreach(t integration.owner.stress.shm.np2 integration.owner.threads.shm.np2
          integration.owner.self.threads)
  if(TEST ${t} AND XTQ_SANITIZE STREQUAL "thread")
    set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT XTQ_IT_PUTS=2000
                 "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${CMAKE_CURRENT_LIST_DIR}/tsan.supp")
  endif()
endforeach()
if(XTQ_SANITIZE STREQUAL "address")
  get_property(owner_tests DIRECTORY PROPERTY TESTS)
  list(FILTER owner_tests INCLUDE REGEX "^integration\\.owner\\.")
  foreach(t IN LISTS owner_tests)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp")
  endforeach()
endif()
