# Engine planes (XTQ_PROGRESS_THREADS): rank i's puts and their acks travel
# on plane i % N at both ends, each plane with its own endpoint and
# progress thread.
#
# `test_short planes` (test_short.c) checks that short tasks from
# initiators on different planes run on different progress threads of the
# target, and those from one plane on one: at 3 ranks with 2 planes, at 4
# ranks with 3 (every initiator on its own plane), and at 4 ranks with 2
# over tcp (ranks 1 and 3 share plane 1). It skips (77) with one plane.
#
# Then heavier traffic cases again with planes, so that puts, acks and
# reposts cross the planes in both directions: test_integration's stress
# (every rank puts to every rank) with 2 planes at 2 and 3 ranks over shm
# and at 3 over tcp, and with 3 planes at 4 ranks over shm; its
# manual-progress version (both ranks keep their 2 planes, with no threads:
# each turn serves every plane); test_stress's threads (several application threads putting at
# once, in a ring) with 2 planes at 2 and 3 ranks. Label: integration; the
# shm short np3, stress and threads cases also under TSan. Last, test_stress's
# overload (4 initiators into 1 target with a slow agent: the load planes
# are for) with 4 planes, so that each initiator has its own receiving
# thread at the target. Label: stress.
#
# test_short and test_stress are defined in short.cmake and stress.cmake,
# included after this file: $<TARGET_FILE:...> is resolved at generation.
if(MPIEXEC_EXECUTABLE)
  xtq_add_mpi_case(NAME integration.planes.short.shm.np3 NP 3 PROVIDER shm TIMEOUT 120
                   ENV XTQ_PROGRESS_THREADS=2
                   COMMAND $<TARGET_FILE:test_short> planes)
  xtq_add_mpi_case(NAME integration.planes.short.shm.np4 NP 4 PROVIDER shm TIMEOUT 120
                   ENV XTQ_PROGRESS_THREADS=3
                   COMMAND $<TARGET_FILE:test_short> planes)
  xtq_add_mpi_case(NAME integration.planes.short.tcp.np4 NP 4 PROVIDER tcp TIMEOUT 120
                   ENV XTQ_PROGRESS_THREADS=2
                   COMMAND $<TARGET_FILE:test_short> planes)
  # Delivery, not liveness: 3 ranks with 2 progress threads each on the
  # 2-core VM can leave a live peer silent for 5 s (integration.cmake).
  foreach(np 2 3)
    xtq_add_mpi_case(NAME integration.planes.stress.shm.np${np} NP ${np} PROVIDER shm
                     ENV XTQ_PROGRESS_THREADS=2 XTQ_PEER_TIMEOUT_MS=20000
                     COMMAND $<TARGET_FILE:test_integration> stress)
    xtq_add_mpi_case(NAME integration.planes.threads.shm.np${np} NP ${np} PROVIDER shm
                     TIMEOUT 120 ENV XTQ_PROGRESS_THREADS=2 XTQ_PEER_TIMEOUT_MS=20000
                     COMMAND $<TARGET_FILE:test_stress> threads 5000)
  endforeach()
  xtq_add_mpi_case(NAME integration.planes.stress.shm.np4 NP 4 PROVIDER shm
                   ENV XTQ_PROGRESS_THREADS=3 XTQ_PEER_TIMEOUT_MS=20000
                   COMMAND $<TARGET_FILE:test_integration> stress)
  xtq_add_mpi_case(NAME integration.planes.stress.tcp.np3 NP 3 PROVIDER tcp
                   ENV XTQ_PROGRESS_THREADS=2 XTQ_PEER_TIMEOUT_MS=20000
                   COMMAND $<TARGET_FILE:test_integration> stress)
  xtq_add_mpi_case(NAME integration.planes.stress_manual.shm.np2 NP 2 PROVIDER shm
                   ENV XTQ_PROGRESS_THREADS=2
                   COMMAND $<TARGET_FILE:test_integration> stress manual)
  foreach(prov shm tcp)
    xtq_add_mpi_case(NAME stress.planes.overload.${prov}.np5 NP 5 PROVIDER ${prov} LABEL stress
                     TIMEOUT 120
                     ENV XTQ_PROGRESS_THREADS=4 XTQ_CPU_WORKERS=1 XTQ_PEER_TIMEOUT_MS=20000
                     COMMAND $<TARGET_FILE:test_stress> overload 20000)
  endforeach()
endif()
xtq_sanitizer_cases(TSAN integration.planes.stress.shm.np2 integration.planes.stress.shm.np3
                         integration.planes.threads.shm.np2 integration.planes.threads.shm.np3
                         integration.planes.short.shm.np3
                    LSAN_REGEX "^(integration|stress)\\.planes\\.")
