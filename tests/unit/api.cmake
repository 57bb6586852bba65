xtq_add_runner(api LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_api.c)
target_compile_definitions(test_api PRIVATE XTQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
xtq_add_runner(reduce LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_reduce.c)
target_link_libraries(test_reduce PRIVATE m)
