# Round trip (raw / cpu / hsa / xtq), message rate, and the stage-breakdown
# reducer. The MPI programs need Open MPI (bootstrap of the raw endpoint).
add_executable(xtq_bench_breakdown ${CMAKE_CURRENT_LIST_DIR}/breakdown.c)
target_link_libraries(xtq_bench_breakdown PRIVATE xtq_bench_harness)
target_compile_options(xtq_bench_breakdown PRIVATE ${XTQ_WARNINGS})
# The CPU reduction kernel against memcpy (no launcher needed).
add_executable(xtq_bench_reduce ${CMAKE_CURRENT_LIST_DIR}/reduce.c)
target_link_libraries(xtq_bench_reduce PRIVATE xtq::xtq xtq_bench_harness)
target_compile_options(xtq_bench_reduce PRIVATE ${XTQ_WARNINGS})
if(XTQ_HAVE_MPI)
  foreach(b rtt msgrate)
    add_executable(xtq_bench_${b} ${CMAKE_CURRENT_LIST_DIR}/${b}.c)
    target_link_libraries(xtq_bench_${b} PRIVATE xtq::xtq xtq_bench_harness MPI::MPI_C
                          PkgConfig::FABRIC)
    target_compile_options(xtq_bench_${b} PRIVATE $<$<COMPILE_LANGUAGE:C>:${XTQ_WARNINGS}>)
  endforeach()
  # xtq_bench_rtt --agent cuda: the GPU task and its host helpers, with the
  # benchmark's own CUDA runtime (static: runs where libcuda is missing and
  # then reports SKIP). Without the CUDA agent, rtt.c uses stubs.
  if(XTQ_HAVE_CUDA)
    target_sources(xtq_bench_rtt PRIVATE ${CMAKE_CURRENT_LIST_DIR}/rtt_cuda.cu)
    target_compile_definitions(xtq_bench_rtt PRIVATE XTQ_BENCH_CUDA=1)
    # -rdc (and the device runtime): the agent's processor in this module
    # launches large dispatches on a grid of their own (XTQ_CUDA_GRID_MIN);
    # not with XTQ_CUDA_DEVICE_LAUNCH=OFF (for MPS).
    set_target_properties(xtq_bench_rtt PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                   LINKER_LANGUAGE CXX
                                                   CUDA_SEPARABLE_COMPILATION ${XTQ_CUDA_DEVICE_LAUNCH}
                                                   CUDA_RESOLVE_DEVICE_SYMBOLS ${XTQ_CUDA_DEVICE_LAUNCH})
    target_link_libraries(xtq_bench_rtt PRIVATE CUDA::cudart_static)
    xtq_cuda_host_only_flags(xtq_bench_rtt)
  endif()
else()
  message(STATUS "bench: MPI not found; xtq_bench_rtt and xtq_bench_msgrate are not built")
endif()
