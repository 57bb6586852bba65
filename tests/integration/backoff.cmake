# XTQ_PROGRESS_BACKOFF_US: after an application thread takes an engine turn
# itself, the progress thread leaves the endpoint alone for the back-off
# (auto: on only where each rank has 3 cores and waits poll, so never on
# the 2-core CI machine). These cases switch it on, with polling waits, on
# the traffic that crosses it most: test_integration's stress (both ranks
# put to each other, so each one's target side is served by its own
# waits' turns or by its thread after a back-off) and test_stress's
# threads (several application threads putting and waiting at once).
# The white-box cases are engine.progress_thread_* (tests/unit).
if(MPIEXEC_EXECUTABLE)
  xtq_add_mpi_case(NAME integration.backoff.stress.shm.np2 NP 2 PROVIDER shm
                   ENV XTQ_PROGRESS_BACKOFF_US=20 XTQ_WAIT_SPIN_US=20
                   COMMAND $<TARGET_FILE:test_integration> stress)
  xtq_add_mpi_case(NAME integration.backoff.stress.tcp.np2 NP 2 PROVIDER tcp
                   ENV XTQ_PROGRESS_BACKOFF_US=20 XTQ_WAIT_SPIN_US=20
                   COMMAND $<TARGET_FILE:test_integration> stress)
  xtq_add_mpi_case(NAME integration.backoff.threads.shm.np2 NP 2 PROVIDER shm TIMEOUT 120
                   ENV XTQ_PROGRESS_BACKOFF_US=20 XTQ_WAIT_SPIN_US=20
                   COMMAND $<TARGET_FILE:test_stress> threads 5000)
endif()
xtq_sanitizer_cases(TSAN integration.backoff.stress.shm.np2 integration.backoff.threads.shm.np2
                    LSAN integration.backoff.stress.shm.np2 integration.backoff.threads.shm.np2)
