# Reconnect (test_reconnect.c): a link outage made by the engine's fault
# hook (messages from the peer dropped on arrival) until each rank declared
# the other down; after it, the peer must come back and nothing acknowledged
# may be lost or run twice. White-box: links the internal build for the
# hook. XTQ_PEER_TIMEOUT_MS=2000: short enough for a quick test, long
# enough that a loaded 2-core host does not declare a peer down by itself.
add_executable(test_reconnect ${CMAKE_CURRENT_LIST_DIR}/test_reconnect.c)
target_compile_options(test_reconnect PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_reconnect PRIVATE xtq_internal xtq_test_harness)

if(MPIEXEC_EXECUTABLE)
  foreach(prov shm tcp)
    xtq_add_mpi_case(NAME integration.reconnect.${prov}.np2 NP 2 PROVIDER ${prov} TIMEOUT 180
                     ENV XTQ_PEER_TIMEOUT_MS=2000 COMMAND $<TARGET_FILE:test_reconnect> outage)
    xtq_sanitizer_cases(LSAN integration.reconnect.${prov}.np2)
  endforeach()
endif()

# Under TSan (CI: ctest -L tsan): peers going down and coming back while
# application threads put and the progress thread fails and releases slots.
if(XTQ_SANITIZE STREQUAL "thread" AND TEST integration.reconnect.shm.np2)
  set_property(TEST integration.reconnect.shm.np2 APPEND PROPERTY LABELS tsan)
  set_property(TEST integration.reconnect.shm.np2 APPEND PROPERTY ENVIRONMENT
               "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${CMAKE_CURRENT_LIST_DIR}/tsan.supp")
endif()
