# The bootstrap, white-box: OOB collectives with ranks as threads, job-key
# agreement, instance ids and shared-memory names, locality. Threads meet
# in shared memory, so the runner also runs under TSan.
xtq_add_runner(bootstrap LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bootstrap.c INTERNAL)
get_property(bootstrap_tests DIRECTORY PROPERTY TESTS)
foreach(t IN LISTS bootstrap_tests)
  if(t MATCHES "^bootstrap\\.")
    set_property(TEST ${t} APPEND PROPERTY LABELS tsan)
  endif()
endforeach()
