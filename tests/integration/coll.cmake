# The collective library (apps/allreduce): its tests live beside it and are
# registered here, where the runner helpers are. Label: coll.
if(TARGET xtq_coll_core)
  set(coll_dir ${PROJECT_SOURCE_DIR}/apps/allreduce)
  # Schedules and the receive side, every rank in one process.
  xtq_add_runner(coll_sched LABEL coll TIMEOUT 600
                 SOURCES ${coll_dir}/tests/test_coll_sched.c ${coll_dir}/tests/coll_sim.c
                 LIBS xtq_coll_core)
  target_include_directories(test_coll_sched PRIVATE ${coll_dir}/tests)
endif()

# The library across processes (mpirun), host teams on the CPU agent.
if(TARGET xtq_coll AND MPIEXEC_EXECUTABLE)
  add_executable(test_coll ${coll_dir}/tests/test_coll.c)
  target_compile_options(test_coll PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
  target_link_libraries(test_coll PRIVATE xtq_coll xtq xtq_test_harness)
  # Odd and even rank counts; 5 folds one rank in (non-power of two).
  foreach(np 2 3 5)
    foreach(c algorithms reduce_roots op_classes nonblocking)
      xtq_add_mpi_case(NAME coll.${c}.shm.np${np} NP ${np} PROVIDER shm LABEL coll
                       COMMAND $<TARGET_FILE:test_coll> ${c} TIMEOUT 300)
    endforeach()
  endforeach()
  xtq_add_mpi_case(NAME coll.algorithms.tcp.np3 NP 3 PROVIDER tcp LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> algorithms TIMEOUT 300)
  xtq_add_mpi_case(NAME coll.subteams.shm.np5 NP 5 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> subteams TIMEOUT 120)
  foreach(m count count_near type op root)
    foreach(alg rd rabenseifner ring)
      xtq_add_mpi_case(NAME coll.mismatch_${m}.${alg}.shm.np3 NP 3 PROVIDER shm LABEL coll
                       COMMAND $<TARGET_FILE:test_coll> mismatch ${m} ${alg} TIMEOUT 120)
    endforeach()
  endforeach()
  xtq_add_mpi_case(NAME coll.mismatch_count.auto.shm.np4 NP 4 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> mismatch count auto TIMEOUT 120)
endif()
