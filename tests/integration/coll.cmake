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
