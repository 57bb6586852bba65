# The collective library (apps/allreduce): its tests live beside it and are
# registered here, where the runner helpers are. Label coll; the cases also
# carry unit / integration, so the README's test command (and the ASan
# stage of CI) runs them: a few minutes in all, no stage of their own.
if(TARGET xtq_coll_core)
  set(coll_dir ${PROJECT_SOURCE_DIR}/apps/allreduce)
  # Schedules and the receive side, every rank in one process.
  xtq_add_runner(coll_sched LABEL coll TIMEOUT 600
                 SOURCES ${coll_dir}/tests/test_coll_sched.c ${coll_dir}/tests/coll_sim.c
                 LIBS xtq_coll_core)
  target_include_directories(test_coll_sched PRIVATE ${coll_dir}/tests)
  # (cmake_parse_arguments keeps one label: the second is appended.)
  get_property(sched_tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS sched_tests)
    if(t MATCHES "^coll_sched\\.")
      set_property(TEST ${t} APPEND PROPERTY LABELS unit)
    endif()
  endforeach()
endif()

# The library across processes (mpirun), host teams on the CPU agent.
if(TARGET xtq_coll AND MPIEXEC_EXECUTABLE)
  add_executable(test_coll ${coll_dir}/tests/test_coll.c)
  target_compile_options(test_coll PRIVATE
    "$<$<COMPILE_LANGUAGE:C>:${XTQ_WARNINGS};-Wno-missing-prototypes>")
  target_link_libraries(test_coll PRIVATE xtq_coll xtq xtq_test_harness)
  target_include_directories(test_coll PRIVATE ${coll_dir})
  if(XTQ_HAVE_CUDA)
    target_sources(test_coll PRIVATE ${coll_dir}/ar_gpu.cu)
    set_target_properties(test_coll PROPERTIES CUDA_STANDARD 17 LINKER_LANGUAGE CXX)
    target_link_libraries(test_coll PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS})
    target_compile_options(test_coll PRIVATE ${XTQ_COLL_CUDA_FLAGS})
    xtq_cuda_host_only_flags(test_coll)
  else()
    target_sources(test_coll PRIVATE ${coll_dir}/ar_gpu_none.c)
  endif()
  set(coll_cases)
  # Odd and even rank counts; 3 and 5 fold ranks in (non-powers of two).
  foreach(np 2 3 5)
    foreach(c algorithms reduce_roots op_classes nonblocking nonblocking_reduce)
      xtq_add_mpi_case(NAME coll.${c}.shm.np${np} NP ${np} PROVIDER shm LABEL coll
                       COMMAND $<TARGET_FILE:test_coll> ${c} TIMEOUT 300)
      list(APPEND coll_cases coll.${c}.shm.np${np})
    endforeach()
  endforeach()
  xtq_add_mpi_case(NAME coll.algorithms.tcp.np3 NP 3 PROVIDER tcp LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> algorithms TIMEOUT 300)
  xtq_add_mpi_case(NAME coll.subteams.shm.np5 NP 5 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> subteams TIMEOUT 120)
  list(APPEND coll_cases coll.algorithms.tcp.np3 coll.subteams.shm.np5)
  # Mismatched calls: every rank fails, whichever algorithms meet.
  foreach(m count count_near type op root)
    foreach(alg rd rabenseifner ring)
      xtq_add_mpi_case(NAME coll.mismatch_${m}.${alg}.shm.np3 NP 3 PROVIDER shm
                       LABEL coll
                       COMMAND $<TARGET_FILE:test_coll> mismatch ${m} ${alg} TIMEOUT 120)
      list(APPEND coll_cases coll.mismatch_${m}.${alg}.shm.np3)
    endforeach()
  endforeach()
  xtq_add_mpi_case(NAME coll.mismatch_count.auto.shm.np4 NP 4 PROVIDER shm
                   LABEL coll COMMAND $<TARGET_FILE:test_coll> mismatch count auto
                   TIMEOUT 120)
  list(APPEND coll_cases coll.mismatch_count.auto.shm.np4)
  # ... with more calls queued behind it than may start.
  xtq_add_mpi_case(NAME coll.mismatch_queued.shm.np3 NP 3 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> mismatch_queued TIMEOUT 120)
  list(APPEND coll_cases coll.mismatch_queued.shm.np3)
  # The waiting caller's poll (auto leaves it off on small hosts, as here).
  xtq_add_mpi_case(NAME coll.nonblocking.spin.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> nonblocking TIMEOUT 300
                   ENV XTQ_COLL_SPIN_US=20)
  list(APPEND coll_cases coll.nonblocking.spin.shm.np2)
  # XTQ_COLL_PROFILE: every rank prints its stages at the team's destroy.
  add_test(NAME coll.profile.shm.np2
           COMMAND ${XTQ_EXPECT_OUTPUT}
                   "xtq_coll profile: rank 1, host team of 2, [0-9]+ calls: call [0-9.]+ us .*message task [0-9.]+ us"
                   ${XTQ_MPIRUN} -np 2 -x XTQ_PROVIDER=shm -x XTQ_COLL_PROFILE=1
                   $<TARGET_FILE:test_coll> nonblocking)
  set_tests_properties(coll.profile.shm.np2 PROPERTIES LABELS "coll;integration"
                       SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL TRUE)
  list(APPEND coll_cases coll.profile.shm.np2)
  # A header that claims more than its payload holds.
  xtq_add_mpi_case(NAME coll.short_piece.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> short_piece TIMEOUT 120)
  list(APPEND coll_cases coll.short_piece.shm.np2)
  # A call completes on LOCAL sends; its acknowledgements come later.
  foreach(prov shm tcp)
    xtq_add_mpi_case(NAME coll.ack_later.${prov}.np2 NP 2 PROVIDER ${prov} LABEL coll
                     COMMAND $<TARGET_FILE:test_coll> ack_later TIMEOUT 120)
    list(APPEND coll_cases coll.ack_later.${prov}.np2)
  endforeach()
  # Same-host single copy: peers read large pieces from the sender (shm),
  # nobody does on tcp; forged pieces pointing elsewhere are refused.
  foreach(np 2 3)
    xtq_add_mpi_case(NAME coll.cma.shm.np${np} NP ${np} PROVIDER shm LABEL coll
                     COMMAND $<TARGET_FILE:test_coll> cma TIMEOUT 300)
    list(APPEND coll_cases coll.cma.shm.np${np})
  endforeach()
  xtq_add_mpi_case(NAME coll.cma.task.shm.np3 NP 3 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> cma TIMEOUT 300 ENV XTQ_COLL_TRIGGERS=task)
  xtq_add_mpi_case(NAME coll.cma.tcp.np2 NP 2 PROVIDER tcp LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> cma TIMEOUT 300)
  list(APPEND coll_cases coll.cma.task.shm.np3 coll.cma.tcp.np2)
  foreach(how address pid)
    xtq_add_mpi_case(NAME coll.cma_forged_${how}.shm.np2 NP 2 PROVIDER shm LABEL coll
                     COMMAND $<TARGET_FILE:test_coll> cma_forged ${how} TIMEOUT 120)
    list(APPEND coll_cases coll.cma_forged_${how}.shm.np2)
  endforeach()
  xtq_add_mpi_case(NAME coll.triggers_default.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> triggers_default TIMEOUT 120)
  list(APPEND coll_cases coll.triggers_default.shm.np2)
  # Both trigger modes whatever the default is: the cases above run the
  # default (auto), these pin each mode (creation fails where the pinned
  # mode cannot run, so a silent fallback cannot pass them).
  foreach(trig engine task)
    foreach(c algorithms nonblocking)
      xtq_add_mpi_case(NAME coll.${c}.${trig}.shm.np3 NP 3 PROVIDER shm LABEL coll
                       COMMAND $<TARGET_FILE:test_coll> ${c} TIMEOUT 300
                       ENV XTQ_COLL_TRIGGERS=${trig})
      list(APPEND coll_cases coll.${c}.${trig}.shm.np3)
    endforeach()
    xtq_add_mpi_case(NAME coll.mismatch_count.ring.${trig}.shm.np3 NP 3 PROVIDER shm LABEL coll
                     COMMAND $<TARGET_FILE:test_coll> mismatch count ring TIMEOUT 120
                     ENV XTQ_COLL_TRIGGERS=${trig})
    list(APPEND coll_cases coll.mismatch_count.ring.${trig}.shm.np3)
  endforeach()
  # CUDA teams (device buffers, the CUDA agent): skip without a GPU.
  xtq_add_mpi_case(NAME coll.gpu_team.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_team TIMEOUT 300)
  # The same with the copies on the stream and the arguments in pinned
  # memory (the default puts both on the processor, in the queue slot).
  xtq_add_mpi_case(NAME coll.gpu_team.stream.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_team TIMEOUT 300
                   ENV XTQ_COLL_GPU_COPY_MAX=0 XTQ_COLL_GPU_INLINE=0 XTQ_COLL_GPU_PEER=off)
  # Pieces through pinned host mirrors (XTQ_COLL_GPU_PEER=off), and peer
  # reads forced (skips where a peer cannot map the other's GPU memory).
  xtq_add_mpi_case(NAME coll.gpu_team.host.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_team TIMEOUT 300
                   ENV XTQ_COLL_GPU_PEER=off)
  xtq_add_mpi_case(NAME coll.gpu_team.peer.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_team TIMEOUT 300
                   ENV XTQ_COLL_GPU_PEER=on)
  # Peer reads with each way of advancing the ready word
  # (XTQ_COLL_GPU_READY; the default, auto, takes both), and without it:
  # the sends wait for their copies (chained).
  xtq_add_mpi_case(NAME coll.gpu_team.ready_off.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_team TIMEOUT 300
                   ENV XTQ_COLL_GPU_PEER=on XTQ_COLL_GPU_READY=off)
  xtq_add_mpi_case(NAME coll.gpu_team.ready.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_team TIMEOUT 300
                   ENV XTQ_COLL_GPU_PEER=on XTQ_COLL_GPU_READY=copy)
  xtq_add_mpi_case(NAME coll.gpu_team.ready_stream.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_team TIMEOUT 300
                   ENV XTQ_COLL_GPU_PEER=on XTQ_COLL_GPU_READY=stream)
  # A peer whose ready word never comes: the reader's call fails, none hangs.
  xtq_add_mpi_case(NAME coll.gpu_ready_lost.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_ready_lost TIMEOUT 120
                   ENV XTQ_COLL_TIMEOUT_MS=3000 XTQ_COLL_GPU_READY=copy)
  xtq_add_mpi_case(NAME coll.gpu_ready_lost.stream.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_ready_lost TIMEOUT 120
                   ENV XTQ_COLL_TIMEOUT_MS=3000 XTQ_COLL_GPU_READY=stream)
  # No timeout at all: the wait ends when a rank fails the call.
  xtq_add_mpi_case(NAME coll.gpu_ready_abort.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_ready_abort TIMEOUT 60
                   ENV XTQ_COLL_TIMEOUT_MS=0 XTQ_COLL_GPU_READY=copy)
  # A peer's GPU buffer smaller than its handle claims: refused, never read
  # past (the message names the rank and both sizes).
  add_test(NAME coll.gpu_ipc_short.shm.np2
           COMMAND ${XTQ_EXPECT_OUTPUT}
                   "rank 0's GPU buffer [0-9]+ of slot [0-9]+: [0-9]+ bytes expected, [0-9]+ mapped here"
                   ${XTQ_MPIRUN} -np 2 -x XTQ_PROVIDER=shm $<TARGET_FILE:test_coll> gpu_ipc_short)
  set_tests_properties(coll.gpu_ipc_short.shm.np2 PROPERTIES LABELS coll SKIP_RETURN_CODE 77
                       TIMEOUT 120 RUN_SERIAL TRUE)
  # A failed team's GPU waits fail at once from then on, ready word or not.
  xtq_add_mpi_case(NAME coll.gpu_wait_after_cancel.shm.np2 NP 2 PROVIDER shm LABEL coll
                   COMMAND $<TARGET_FILE:test_coll> gpu_wait_after_cancel TIMEOUT 120)
  if(TARGET xtq_allreduce)
    # Every GPU path of the application, each checked (skips without a GPU).
    xtq_add_mpi_case(NAME coll.gpu_paths.shm.np2 NP 2 PROVIDER shm LABEL coll
                     COMMAND $<TARGET_FILE:xtq_allreduce> --require-gpu
                             --modes staged,hsa,xtqgpu,nccl --sizes 8,4K,64K,1M --iters 3
                     TIMEOUT 300)
    set_tests_properties(coll.gpu_paths.shm.np2 PROPERTIES FAIL_REGULAR_EXPRESSION "FAILED")
    # The application's CPU paths, checked, at an odd rank count.
    xtq_add_mpi_case(NAME coll.app.shm.np3 NP 3 PROVIDER shm LABEL coll
                     COMMAND $<TARGET_FILE:xtq_allreduce> --modes mpi,xtq
                             --sizes 8,4K,64K,1M --iters 3 TIMEOUT 300)
    set_tests_properties(coll.app.shm.np3 PROPERTIES FAIL_REGULAR_EXPRESSION "FAILED")
    list(APPEND coll_cases coll.app.shm.np3)
  endif()
  foreach(t IN LISTS coll_cases)
    set_property(TEST ${t} APPEND PROPERTY LABELS integration)
  endforeach()
  set(coll_gpu_cases coll.gpu_team.shm.np2 coll.gpu_team.stream.shm.np2
      coll.gpu_team.host.shm.np2 coll.gpu_team.peer.shm.np2 coll.gpu_team.ready_off.shm.np2
      coll.gpu_team.ready.shm.np2 coll.gpu_team.ready_stream.shm.np2 coll.gpu_ready_lost.shm.np2
      coll.gpu_ready_lost.stream.shm.np2 coll.gpu_ready_abort.shm.np2
      coll.gpu_ipc_short.shm.np2 coll.gpu_wait_after_cancel.shm.np2)
  foreach(t IN LISTS coll_gpu_cases ITEMS coll.gpu_paths.shm.np2)
    if(TEST ${t})
      set_property(TEST ${t} APPEND PROPERTY LABELS gpu)
    endif()
  endforeach()
  if(XTQ_SANITIZE STREQUAL "address")
    # PMIx's exit-time leaks are suppressed (lsan.supp); Open MPI's (the
    # application's MPI_Init) sit in components it has unloaded by then,
    # which no suppression can name: leak checking is off for those two.
    foreach(t IN LISTS coll_cases coll_gpu_cases)
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                   "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp")
    endforeach()
    foreach(t coll.app.shm.np3 coll.gpu_paths.shm.np2)
      if(TEST ${t})
        set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
      endif()
    endforeach()
  endif()
  # Under TSan (CI: ctest -L tsan): tasks on agent workers against the
  # caller's thread, every algorithm in both trigger modes (large pieces read by the workers
  # from the senders: same-host single copy), a mismatch, a failed read.
  if(XTQ_SANITIZE STREQUAL "thread")
    foreach(t coll.algorithms.shm.np3 coll.algorithms.task.shm.np3
              coll.mismatch_count.ring.shm.np3 coll.cma_forged_address.shm.np2)
      set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                   "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${CMAKE_CURRENT_LIST_DIR}/tsan.supp")
    endforeach()
  endif()
endif()
