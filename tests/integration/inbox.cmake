# Inboxes on one host (test_inbox.c; xtq/nic-emul/inbox.c): order kept
# across the inbox and the transport, the ring full, the inbox off, and
# what a peer writes into its ring that no libxtq would (white-box).
add_executable(test_inbox ${CMAKE_CURRENT_LIST_DIR}/test_inbox.c)
target_compile_options(test_inbox PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_inbox PRIVATE xtq_internal xtq_test_harness)
if(MPIEXEC_EXECUTABLE)
  xtq_add_mpi_case(NAME integration.inbox.order.shm.np2 NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_inbox> order)
  xtq_add_mpi_case(NAME integration.inbox.order.shm.np2.manual NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_inbox> order manual)
  xtq_add_mpi_case(NAME integration.inbox.order.shm.np2.slots2 NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_inbox> order ENV XTQ_SHM_INBOX_SLOTS=2)
  xtq_add_mpi_case(NAME integration.inbox.order.shm.np2.owner NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_inbox> order ENV XTQ_ENDPOINT_OWNER=progress)
  xtq_add_mpi_case(NAME integration.inbox.order.shm.np2.off NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_inbox> order ENV XTQ_SHM_INBOX=0)
  xtq_add_mpi_case(NAME integration.inbox.hostile.shm.np2 NP 2 PROVIDER shm
                   COMMAND $<TARGET_FILE:test_inbox> hostile)
  xtq_sanitizer_cases(LSAN_REGEX "^integration\\.inbox\\.")
endif()
