# Completion counters, white-box (the engine's attach/complete calls stand
# in for puts); also under TSan. manual_wait brings up a real context.
xtq_add_runner(counter LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_counter.c INTERNAL)
foreach(c counts_and_first_error wait_woken_by_completions destroy_right_after_wait)
  set_property(TEST counter.${c} APPEND PROPERTY LABELS tsan)
endforeach()
set_tests_properties(counter.manual_wait PROPERTIES LABELS integration)
