# Multi-rank integration tests: tests/integration/test_integration.c,
# launched through mpirun at 2 and 4 ranks over shm and tcp, plus singleton
# (no launcher) cases. Label: integration.
add_executable(test_integration ${CMAKE_CURRENT_LIST_DIR}/test_integration.c)
target_compile_options(test_integration PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_integration PRIVATE xtq xtq_test_harness)

if(MPIEXEC_EXECUTABLE)
  foreach(prov shm tcp)
    foreach(np 2 4)
      # Delivery, not liveness: 4 ranks on the 2-core VM can leave a live
      # peer silent for 5 s (tests/multihost/CMakeLists.txt, mh_live).
      xtq_add_mpi_case(NAME integration.stress.${prov}.np${np} NP ${np} PROVIDER ${prov}
                       ENV XTQ_PEER_TIMEOUT_MS=20000
                       COMMAND $<TARGET_FILE:test_integration> stress)
    endforeach()
    xtq_add_mpi_case(NAME integration.stress_manual.${prov}.np2 NP 2 PROVIDER ${prov}
                     COMMAND $<TARGET_FILE:test_integration> stress manual)
    xtq_add_mpi_case(NAME integration.large.${prov}.np2 NP 2 PROVIDER ${prov}
                     COMMAND $<TARGET_FILE:test_integration> large)
    xtq_add_mpi_case(NAME integration.idle_cpu.${prov}.np2 NP 2 PROVIDER ${prov}
                     COMMAND $<TARGET_FILE:test_integration> idle_cpu)
    foreach(c bad_nokernel bad_nofunc bad_noqueue bad_kernarg payload_bytes)
      xtq_add_mpi_case(NAME integration.${c}.${prov}.np2 NP 2 PROVIDER ${prov}
                       COMMAND $<TARGET_FILE:test_integration> ${c})
    endforeach()
  endforeach()
  xtq_add_mpi_case(NAME integration.bad_nokernel.shm.np2.manual NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_integration> bad_nokernel manual)
  # Completion words on one host (XTQ_DIRECT_COMPLETION): used on shm by a
  # waiter that polls (manual progress; a thread given a spin), never with
  # the setting off, nor on tcp (auto: shm only).
  xtq_add_mpi_case(NAME integration.direct_completion.shm.np2 NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_integration> direct_completion manual)
  xtq_add_mpi_case(NAME integration.direct_completion.shm.np2.thread NP 2 PROVIDER shm
                   ENV XTQ_WAIT_SPIN_US=2000
                   COMMAND $<TARGET_FILE:test_integration> direct_completion thread)
  xtq_add_mpi_case(NAME integration.direct_completion.shm.np2.test NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_integration> direct_completion thread test)
  xtq_add_mpi_case(NAME integration.direct_completion.shm.np2.flush NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_integration> direct_completion manual flush)
  xtq_add_mpi_case(NAME integration.direct_completion.shm.np2.flush_thread NP 2 PROVIDER shm
                   ENV XTQ_WAIT_SPIN_US=2000
                   COMMAND $<TARGET_FILE:test_integration> direct_completion thread flush)
  xtq_add_mpi_case(NAME integration.direct_completion.shm.np2.trigger NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_integration> direct_completion manual trigger)
  xtq_add_mpi_case(NAME integration.direct_completion.shm.np2.off NP 2 PROVIDER shm
                   ENV XTQ_DIRECT_COMPLETION=0
                   COMMAND $<TARGET_FILE:test_integration> direct_completion manual off)
  xtq_add_mpi_case(NAME integration.direct_completion.tcp.np2 NP 2 PROVIDER tcp
                   COMMAND $<TARGET_FILE:test_integration> direct_completion manual off)
endif()

# A process started without a launcher is rank 0 of 1: puts go to itself.
foreach(c stress put_args bad_nokernel large window_nonblocking destroy_busy payload_bytes)
  add_test(NAME integration.self.${c} COMMAND test_integration ${c})
  set_tests_properties(integration.self.${c} PROPERTIES LABELS integration SKIP_RETURN_CODE 77
                       TIMEOUT 300)
endforeach()
add_test(NAME integration.self.direct_completion COMMAND test_integration direct_completion manual)
set_tests_properties(integration.self.direct_completion PROPERTIES LABELS integration
                     SKIP_RETURN_CODE 77 TIMEOUT 300)
add_test(NAME integration.self.stress_manual COMMAND test_integration stress manual)
set_tests_properties(integration.self.stress_manual PROPERTIES LABELS integration
                     SKIP_RETURN_CODE 77 TIMEOUT 300)

# The Fig. 6 example: alone (put to itself) and at 4 ranks.
if(TARGET fig6)
  add_test(NAME examples.fig6.self
           COMMAND ${XTQ_EXPECT_OUTPUT} "rank 0: task ran.*OK" $<TARGET_FILE:fig6>)
  set_tests_properties(examples.fig6.self PROPERTIES LABELS integration TIMEOUT 60)
  if(MPIEXEC_EXECUTABLE)
    foreach(prov shm tcp)
      xtq_add_mpi_case(NAME examples.fig6.${prov}.np4 NP 4 PROVIDER ${prov}
                       COMMAND $<TARGET_FILE:fig6> TIMEOUT 120)
      set_tests_properties(examples.fig6.${prov}.np4 PROPERTIES
                           FAIL_REGULAR_EXPRESSION "WRONG|xtq_[a-z_]+\\(.*\\) failed:|completion missing")
    endforeach()
  endif()
endif()

# xtq_info (tools/ is configured before testing is enabled, so its tests
# live here): it runs, and its parameter rows equal the README's table.
if(TARGET xtq_info)
  add_test(NAME tools.xtq_info_params_match_readme
           COMMAND bash -c "diff <($<TARGET_FILE:xtq_info> --params-markdown) <(grep '^| XTQ_' ${PROJECT_SOURCE_DIR}/README.md)")
  add_test(NAME tools.xtq_info_runs COMMAND xtq_info)
  set_tests_properties(tools.xtq_info_params_match_readme tools.xtq_info_runs
                       PROPERTIES LABELS unit TIMEOUT 60)
endif()

# Under ASan, the PMIx client's own exit-time leaks are suppressed (mpirun
# passes the environment on to local ranks). Under TSan (CI: ctest -L
# tsan): the engine's whole path at 2 ranks on shm and alone, smaller.
# Reports inside libfabric, PMIx and hwloc are suppressed (tsan.supp); ours
# are not.
xtq_sanitizer_cases(TSAN integration.stress.shm.np2 integration.self.stress
                         integration.direct_completion.shm.np2.thread
                         integration.self.window_nonblocking
                    LSAN_REGEX "^(integration|examples|tools)\\.")
