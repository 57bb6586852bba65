# The benchmark harness (bench/harness/), shared by the benchmarks and the
# apps that report figures: argument parsing, mode selection, timing,
# statistics, table and CSV output.
add_library(xtq_bench_harness STATIC ${CMAKE_CURRENT_LIST_DIR}/harness/bench_harness.c)
target_include_directories(xtq_bench_harness PUBLIC ${CMAKE_CURRENT_LIST_DIR}/harness)
target_compile_definitions(xtq_bench_harness PRIVATE _GNU_SOURCE)
target_compile_options(xtq_bench_harness PRIVATE ${XTQ_WARNINGS})
target_link_libraries(xtq_bench_harness PUBLIC m)
