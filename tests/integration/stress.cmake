# Flow control under overload (tests/integration/test_stress.c): 4
# initiators -> 1 target with a 64-slot queue and a slow agent. Label:
# stress. The README's "Stress" subsection runs the 1,000,000-task version.
# Five ranks on the 2-core VM can leave a live peer silent for the default
# 5 s peer timeout; these check delivery, not liveness: 20 s.
add_executable(test_stress ${CMAKE_CURRENT_LIST_DIR}/test_stress.c)
target_compile_options(test_stress PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_stress PRIVATE xtq xtq_test_harness)

if(MPIEXEC_EXECUTABLE)
  foreach(prov shm tcp)
    xtq_add_mpi_case(NAME stress.overload.${prov}.np5 NP 5 PROVIDER ${prov} LABEL stress
                     TIMEOUT 120 ENV XTQ_CPU_WORKERS=1 XTQ_PEER_TIMEOUT_MS=20000
                     COMMAND $<TARGET_FILE:test_stress> overload 20000)
    # Receive-space exhaustion: two regions of two 4 KiB messages each, so
    # regions are held by backlogged tasks while more messages arrive
    # (docs/flow-control.md).
    xtq_add_mpi_case(NAME stress.rx_exhaust.${prov}.np5 NP 5 PROVIDER ${prov} LABEL stress
                     TIMEOUT 120
                     ENV XTQ_CPU_WORKERS=1 XTQ_MAX_MSG_SIZE=4096 XTQ_RX_BUFFERS=2
                         XTQ_RX_BUFFER_SIZE=0 XTQ_PEER_TIMEOUT_MS=20000
                     COMMAND $<TARGET_FILE:test_stress> overload 5000)
  endforeach()
endif()
xtq_sanitizer_cases(LSAN_REGEX "^stress\\.(overload|rx_exhaust)\\.(shm|tcp)\\.np5$")

# Several application threads xtq_put at once (alone, and 2 ranks on shm);
# also under TSan.
add_test(NAME integration.self.threads COMMAND test_stress threads 5000)
set_tests_properties(integration.self.threads PROPERTIES LABELS "integration;tsan" TIMEOUT 120
                     SKIP_RETURN_CODE 77)
if(MPIEXEC_EXECUTABLE)
  xtq_add_mpi_case(NAME integration.threads.shm.np2 NP 2 PROVIDER shm TIMEOUT 120
                   COMMAND $<TARGET_FILE:test_stress> threads 5000)
  set_property(TEST integration.threads.shm.np2 APPEND PROPERTY LABELS tsan)
endif()
foreach(t integration.self.threads integration.threads.shm.np2)
  if(TEST ${t} AND XTQ_SANITIZE STREQUAL "thread")
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${CMAKE_CURRENT_LIST_DIR}/tsan.supp")
  elseif(TEST ${t} AND XTQ_SANITIZE STREQUAL "address")
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp")
  endif()
endforeach()
