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
xtq_sanitizer_cases(TSAN integration.owner.stress.shm.np2 integration.owner.threads.shm.np2
                    integration.owner.self.threads
                    LSAN_REGEX "^integration\\.owner\\.")
