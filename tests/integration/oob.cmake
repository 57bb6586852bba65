# Out-of-band bootstrap (xtq_init_attr_t.oob): forked ranks meeting in a
# shared-memory allgather, no launcher (test_oob.c), and MPI ranks with
# MPI_Iallgather/MPI_Test under mpirun (test_oob_mpi.c), as mpi-ext does.
add_executable(test_oob ${CMAKE_CURRENT_LIST_DIR}/test_oob.c)
target_compile_options(test_oob PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_oob PRIVATE xtq xtq_test_harness)
foreach(c fork_thread fork_manual two_jobs_one_key init_attr_mask)
  add_test(NAME integration.oob.${c} COMMAND test_oob ${c})
  set_tests_properties(integration.oob.${c} PROPERTIES LABELS integration TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()
add_test(NAME integration.oob.fork_manual.tcp COMMAND test_oob fork_manual 2)
set_tests_properties(integration.oob.fork_manual.tcp PROPERTIES LABELS integration TIMEOUT 300
                     ENVIRONMENT XTQ_PROVIDER=tcp)

if(XTQ_HAVE_MPI AND MPIEXEC_EXECUTABLE)
  add_executable(test_oob_mpi ${CMAKE_CURRENT_LIST_DIR}/test_oob_mpi.c)
  target_compile_options(test_oob_mpi PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
  target_link_libraries(test_oob_mpi PRIVATE xtq xtq_test_harness MPI::MPI_C)
  foreach(prov shm tcp)
    xtq_add_mpi_case(NAME integration.oob_mpi.${prov}.np4 NP 4 PROVIDER ${prov}
                     COMMAND $<TARGET_FILE:test_oob_mpi> split)
  endforeach()
  xtq_add_mpi_case(NAME integration.oob_mpi_manual.shm.np2 NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_oob_mpi> split manual)
endif()

if(XTQ_SANITIZE STREQUAL "address")
  foreach(t integration.oob.fork_thread integration.oob.fork_manual
            integration.oob.two_jobs_one_key integration.oob.init_attr_mask
            integration.oob.fork_manual.tcp)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp")
  endforeach()
  # Open MPI leaks at exit from MCA components it has already unloaded
  # (frames "<unknown module>": no suppression can name them). The MPI
  # cases keep ASan's other checks; libxtq's OOB path is leak-checked by
  # the forked cases above.
  foreach(t integration.oob_mpi.shm.np4 integration.oob_mpi.tcp.np4
            integration.oob_mpi_manual.shm.np2)
    if(TEST ${t})
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
    endif()
  endforeach()
endif()
