# Core: AQL layout against hsa.h, signals, queues, the CPU agent.
xtq_add_runner(aql LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_aql.c)
xtq_add_runner(signal LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_signal.c INTERNAL)
xtq_add_runner(queue LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_queue.c INTERNAL)
xtq_add_runner(cpu_agent LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_agent.c INTERNAL)
target_include_directories(test_cpu_agent PRIVATE ${PROJECT_SOURCE_DIR}/hsa-glue)
# The CUDA processor's idle exit, host half and a model of the device (no GPU).
xtq_add_runner(cuda_idle LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_idle.c INTERNAL)
target_include_directories(test_cuda_idle PRIVATE ${PROJECT_SOURCE_DIR}/hsa-glue)
# The engine/agent runners are meaningful under TSan (CI: ctest -L tsan).
get_property(core_tests DIRECTORY PROPERTY TESTS)
foreach(t IN LISTS core_tests)
  if(t MATCHES "^(signal|queue|cpu_agent|cuda_idle)\\.")
    set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
  endif()
endforeach()
# White-box engine tests in one process (stop racing with agent threads);
# also under TSan and ASan, with the integration tests' third-party
# suppressions (libfabric, PMIx: see tests/integration/tsan.supp).
xtq_add_runner(engine LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine.c INTERNAL)
get_property(engine_tests DIRECTORY PROPERTY TESTS)
list(FILTER engine_tests INCLUDE REGEX "^engine\\.")
foreach(t IN LISTS engine_tests)
  set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
  if(XTQ_SANITIZE STREQUAL "thread")
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${PROJECT_SOURCE_DIR}/tests/integration/tsan.supp")
  elseif(XTQ_SANITIZE STREQUAL "address")
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/integration/lsan.supp")
  endif()
endforeach()
