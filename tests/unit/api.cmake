xtq_add_runner(api LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_api.c)
target_compile_definitions(test_api PRIVATE XTQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
xtq_add_runner(reduce LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_reduce.c)
# ...and their loops vectorised in the built library (not under the
# sanitizers, whose instrumentation may keep a loop scalar).
if(NOT XTQ_SANITIZE)
  add_test(NAME reduce.loops_vectorised
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/reduce_vectorized.sh $<TARGET_FILE:xtq>)
  set_tests_properties(reduce.loops_vectorised PROPERTIES LABELS unit TIMEOUT 60
                       SKIP_RETURN_CODE 77)
endif()
target_link_libraries(test_reduce PRIVATE m)
