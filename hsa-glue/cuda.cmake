# CUDA agent. With nvcc: the host side (cuda_agent.c, C warnings) and the
# persistent packet processor (cuda_agent.cu, nvcc, none of the C flags),
# sm_90 machine code plus portable PTX, and the CUDA runtime linked
# statically so libxtq loads on machines without libcuda (the runtime
# dlopens the driver; absent => agent unavailable with the reason).
# Without nvcc only the public entry points, returning -XTQ_ENOAGENT.
if(NOT XTQ_HAVE_CUDA)
  target_sources(xtq_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_agent.c)
  return()
endif()

find_package(CUDAToolkit REQUIRED GLOBAL)

target_sources(xtq_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_agent.c
                               ${CMAKE_CURRENT_LIST_DIR}/cuda_builtin.cu)
target_compile_definitions(xtq_obj PUBLIC XTQ_HAVE_CUDA_AGENT=1)
target_include_directories(xtq_obj SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
set_target_properties(xtq_obj PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
target_compile_options(xtq_obj PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills>)

# Sanitizer flags from add_compile_options() reach every language; nvcc
# rejects them, and device code has its own checker (compute-sanitizer).
# Those from add_link_options() reach the device link of -rdc targets,
# where nvcc splits "-fsanitize=address,undefined" at the comma: host link
# only. Call on every target with .cu sources.
function(xtq_cuda_host_only_flags target)
  get_target_property(opts ${target} COMPILE_OPTIONS)
  if(opts)
    set(new)
    foreach(o IN LISTS opts)
      if(o MATCHES "^-f(no-)?(sanitize|omit-frame-pointer)")
        list(APPEND new "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${o}>")
      else()
        list(APPEND new "${o}")
      endif()
    endforeach()
    set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${new}")
  endif()
  get_target_property(lopts ${target} LINK_OPTIONS)
  if(lopts)
    set(new)
    foreach(o IN LISTS lopts)
      if(o MATCHES "^-fsanitize")
        string(REPLACE "," "$<COMMA>" o "${o}")
        list(APPEND new "$<HOST_LINK:${o}>")
      else()
        list(APPEND new "${o}")
      endif()
    endforeach()
    set_target_properties(${target} PROPERTIES LINK_OPTIONS "${new}")
  endif()
endfunction()
xtq_cuda_host_only_flags(xtq_obj)

target_link_libraries(xtq PRIVATE CUDA::cudart_static)
target_link_libraries(xtq_internal PUBLIC CUDA::cudart_static)

# Tool (tools/gpu_rtt.c: in-process round trip, the CUDA agent vs a host
# launch; internal entry points, so not a public-API benchmark).
if(XTQ_BUILD_APPS AND EXISTS ${PROJECT_SOURCE_DIR}/tools/gpu_rtt.c)
  add_executable(xtq_gpu_rtt ${PROJECT_SOURCE_DIR}/tools/gpu_rtt.c
                             ${PROJECT_SOURCE_DIR}/tools/gpu_rtt_kernels.cu)
  target_compile_options(xtq_gpu_rtt PRIVATE $<$<COMPILE_LANGUAGE:C>:${XTQ_WARNINGS}>)
  # -rdc: the processor launches grids, and the benchmark's pollers
  # launch kernels and device graphs (the device runtime, cudadevrt).
  set_target_properties(xtq_gpu_rtt PROPERTIES CUDA_STANDARD 17 LINKER_LANGUAGE CUDA
                                               CUDA_SEPARABLE_COMPILATION ON)
  target_link_libraries(xtq_gpu_rtt PRIVATE xtq_internal CUDA::cudart_static)
  xtq_cuda_host_only_flags(xtq_gpu_rtt)
endif()
