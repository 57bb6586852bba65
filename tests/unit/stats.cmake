# The counters' sized query (xtq_query_stats) against xtq_get_stats, on a
# context of one rank, through the public API only.
xtq_add_runner(stats LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_stats.c)
