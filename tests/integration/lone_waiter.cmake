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
foreach(t integration.lone0.stress.shm.np2 integration.lone0.threads.shm.np2)
  if(TEST ${t} AND XTQ_SANITIZE STREQUAL "thread")
    set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT XTQ_IT_PUTS=2000
                 "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${CMAKE_CURRENT_LIST_DIR}/tsan.supp")
  endif()
endforeach()
if(XTQ_SANITIZE STREQUAL "address")
  foreach(t integration.lone0.stress.shm.np2 integration.lone0.threads.shm.np2)
    if(TEST ${t})
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                   "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp")
    endif()
  endforeach()
endif()
