# The collective library (libxtq_coll) and the xtq_allreduce application.
add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/allreduce ${CMAKE_BINARY_DIR}/apps/allreduce)
