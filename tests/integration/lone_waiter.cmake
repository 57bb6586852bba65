# XTQ_LONE_WAITER: by default a thread alone in xtq_completion_wait takes
# the progress turns and sleeps on the transport while the progress thread
# parks (every other case runs that way: the stress case has both ranks
# waiting while they serve each other's puts, the threads case several
# waiters of which one is lone). The waiter that sleeps on its completion
# word (XTQ_LONE_WAITER=0) keeps its own cases, also under TSan.
if(MPIEXEC_EXECUTABLE)
  xtq_add_mpi_case(NAME integration.lone0.stress.shm.np2 NP 2 PROVIDER shm
                   ENV XTQ_LONE_WAITER=0
                   COMMAND $<TARGET_FILE:test_integration> stress)
  xtq_add_mpi_case(NAME integration.lone0.threads.shm.np2 NP 2 PROVIDER shm TIMEOUT 120
                   ENV XTQ_LONE_WAITER=0
                   COMMAND $<TARGET_FILE:test_stress> threads 5000)
endif()
xtq_sanitizer_cases(TSAN integration.lone0.stress.shm.np2 integration.lone0.threads.shm.np2
                    LSAN integration.lone0.stress.shm.np2 integration.lone0.threads.shm.np2)
