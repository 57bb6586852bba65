# Round trip (raw / cpu / hsa / xtq), message rate, and the stage-breakdown
# reducer. The MPI programs need Open MPI (bootstrap of the raw endpoint).
add_executable(xtq_bench_breakdown ${CMAKE_CURRENT_LIST_DIR}/breakdown.c)
target_link_libraries(xtq_bench_breakdown PRIVATE xtq_bench_harness)
target_compile_options(xtq_bench_breakdown PRIVATE ${XTQ_WARNINGS})
if(XTQ_HAVE_MPI)
  foreach(b rtt msgrate)
    add_executable(xtq_bench_${b} ${CMAKE_CURRENT_LIST_DIR}/${b}.c)
    target_link_libraries(xtq_bench_${b} PRIVATE xtq::xtq xtq_bench_harness MPI::MPI_C
                          PkgConfig::FABRIC)
    target_compile_options(xtq_bench_${b} PRIVATE ${XTQ_WARNINGS})
  endforeach()
else()
  message(STATUS "bench: MPI not found; xtq_bench_rtt and xtq_bench_msgrate are not built")
endif()
