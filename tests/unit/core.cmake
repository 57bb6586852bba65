# Core: AQL layout against hsa.h, signals, queues, the CPU agent.
xtq_add_runner(aql LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_aql.c)
xtq_add_runner(signal LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_signal.c INTERNAL)
xtq_add_runner(queue LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_queue.c INTERNAL)
xtq_add_runner(cpu_agent LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_agent.c INTERNAL)
target_include_directories(test_cpu_agent PRIVATE ${PROJECT_SOURCE_DIR}/hsa-glue)
# The engine/agent runners are meaningful under TSan (CI: ctest -L tsan).
get_property(core_tests DIRECTORY PROPERTY TESTS)
foreach(t IN LISTS core_tests)
  if(t MATCHES "^(signal|queue|cpu_agent)\\.")
    set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
  endif()
endforeach()
