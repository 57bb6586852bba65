# Core: AQL layout against hsa.h, signals, queues, the CPU agent.
xtq_add_runner(aql LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_aql.c)
xtq_add_runner(signal LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_signal.c INTERNAL)
xtq_add_runner(queue LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_queue.c INTERNAL)
xtq_add_runner(cpu_agent LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_agent.c INTERNAL)
target_include_directories(test_cpu_agent PRIVATE ${PROJECT_SOURCE_DIR}/hsa-glue)
