# CUDA agent tests (label gpu; also unit, so CI runs them and they SKIP
# with the reason where no CUDA device is present). Task sources are built
# by nvcc into their own library: the C warning flags stay off them.
if(NOT XTQ_HAVE_CUDA)
  return()
endif()
add_library(xtq_gpu_test_tasks STATIC ${PROJECT_SOURCE_DIR}/tests/gpu/cuda_tasks.cu)
target_include_directories(xtq_gpu_test_tasks PUBLIC ${PROJECT_SOURCE_DIR}/tests/gpu
                                                     ${PROJECT_SOURCE_DIR}/include
                                                     ${PROJECT_SOURCE_DIR}/apps/allreduce/include)
# Separate compilation and the device runtime: the processor launches
# large dispatches on a grid of their own (XTQ_CUDA_GRID_MIN).
set_target_properties(xtq_gpu_test_tasks PROPERTIES CUDA_STANDARD 17 CUDA_SEPARABLE_COMPILATION ON
                                                    CUDA_RESOLVE_DEVICE_SYMBOLS ON)
target_link_libraries(xtq_gpu_test_tasks PUBLIC CUDA::cudart_static)
xtq_cuda_host_only_flags(xtq_gpu_test_tasks)
# The same tasks without -rdc: every case again, with dispatches above
# XTQ_CUDA_GRID_MIN in the processor's blocks (a module that cannot
# launch grids), and the build compute-sanitizer's synccheck checks (it
# does not support dynamic parallelism).
add_library(xtq_gpu_test_tasks_plain STATIC ${PROJECT_SOURCE_DIR}/tests/gpu/cuda_tasks.cu)
target_include_directories(xtq_gpu_test_tasks_plain PUBLIC ${PROJECT_SOURCE_DIR}/tests/gpu
                                                           ${PROJECT_SOURCE_DIR}/include
                                                           ${PROJECT_SOURCE_DIR}/apps/allreduce/include)
set_target_properties(xtq_gpu_test_tasks_plain PROPERTIES CUDA_STANDARD 17)
target_link_libraries(xtq_gpu_test_tasks_plain PUBLIC CUDA::cudart_static)
xtq_cuda_host_only_flags(xtq_gpu_test_tasks_plain)
# Also "unit": CI runs them, and they SKIP there with the reason.
xtq_add_runner(cuda LABEL "gpu;unit" SOURCES ${PROJECT_SOURCE_DIR}/tests/gpu/test_cuda_agent.c
               INTERNAL LIBS xtq_gpu_test_tasks TIMEOUT 60)
xtq_add_runner(cuda_plain LABEL "gpu;unit"
               SOURCES ${PROJECT_SOURCE_DIR}/tests/gpu/test_cuda_agent.c
               INTERNAL LIBS xtq_gpu_test_tasks_plain TIMEOUT 60)
# (LABEL takes one word: the list is set here.)
xtq_test_cases_of(xtq_gpu_cases ${PROJECT_SOURCE_DIR}/tests/gpu/test_cuda_agent.c)
foreach(c IN LISTS xtq_gpu_cases)
  set_tests_properties(cuda.${c} cuda_plain.${c} PROPERTIES LABELS "gpu;unit")
endforeach()
# The retiring left to the agent's retire thread (XTQ_AGENT_RETIRE=thread):
# the engine's tasks still run once and are acked, none by engine turns.
foreach(r cuda cuda_plain)
  add_test(NAME ${r}.engine_turns_retire.thread COMMAND test_${r} engine_turns_retire)
  set_tests_properties(${r}.engine_turns_retire.thread PROPERTIES LABELS "gpu;unit"
                       SKIP_RETURN_CODE 77 TIMEOUT 60 ENVIRONMENT "XTQ_AGENT_RETIRE=thread")
endforeach()
