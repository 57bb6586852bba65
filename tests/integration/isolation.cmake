# Isolation between jobs (test_isolation.c, isolation.sh): two independent
# processes over tcp with different XTQ_JOB_KEY, one aiming at the other.
# White-box: the attacker uses an engine hook to aim at a foreign endpoint.
add_executable(test_isolation ${CMAKE_CURRENT_LIST_DIR}/test_isolation.c)
target_compile_options(test_isolation PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_isolation PRIVATE xtq_internal xtq_test_harness)
add_test(NAME integration.isolation.tcp
         COMMAND ${XTQ_EXPECT_OUTPUT} "victim exit 0, attacker exit 0"
                 ${CMAKE_CURRENT_LIST_DIR}/isolation.sh $<TARGET_FILE:test_isolation>)
set_tests_properties(integration.isolation.tcp PROPERTIES LABELS integration TIMEOUT 120)
xtq_sanitizer_cases(LSAN integration.isolation.tcp)
# Within one job: a rank forges another's source rank (FI_SOURCE check).
if(MPIEXEC_EXECUTABLE)
  foreach(prov shm tcp)
    xtq_add_mpi_case(NAME integration.forged_rank.${prov}.np3 NP 3 PROVIDER ${prov} TIMEOUT 120
                     COMMAND $<TARGET_FILE:test_isolation> forged_rank)
    xtq_sanitizer_cases(LSAN integration.forged_rank.${prov}.np3)
  endforeach()
endif()
