# apps/cntk-shim: CNTK's DistributedCommunicator in C (libxtq_shim), the
# data-parallel trainer xtq_train, and the PyTorch DDP hook (Python,
# copied beside the library so PYTHONPATH=<build>/apps/cntk-shim finds
# both). Back-ends: mpi (needs MPI); xtq (needs libxtq_coll, the xtq_coll
# target of apps/allreduce).
set(XTQ_SHIM_DIR ${CMAKE_CURRENT_LIST_DIR}/cntk-shim)
set(XTQ_SHIM_OUT ${CMAKE_BINARY_DIR}/apps/cntk-shim)

if(NOT XTQ_HAVE_MPI)
  message(STATUS "cntk-shim: MPI not found; libxtq_shim (no back-end without it) and xtq_train are not built")
  return()
endif()

add_library(xtq_shim SHARED ${XTQ_SHIM_DIR}/shim.c ${XTQ_SHIM_DIR}/backend_mpi.c
                            ${XTQ_SHIM_DIR}/shim_cuda.c)
target_include_directories(xtq_shim PUBLIC ${XTQ_SHIM_DIR}/include)
target_compile_definitions(xtq_shim PRIVATE XTQ_SHIM_BUILDING _GNU_SOURCE XTQ_SHIM_HAVE_MPI=1)
target_compile_options(xtq_shim PRIVATE ${XTQ_WARNINGS})
target_link_libraries(xtq_shim PUBLIC xtq::xtq PRIVATE MPI::MPI_C)
set_target_properties(xtq_shim PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${XTQ_SHIM_OUT}
                                          C_VISIBILITY_PRESET hidden)
if(XTQ_SANITIZE STREQUAL "")
  target_link_options(xtq_shim PRIVATE -Wl,--no-undefined)
endif()
if(XTQ_HAVE_CUDA)
  target_compile_definitions(xtq_shim PRIVATE XTQ_SHIM_HAVE_CUDA=1)
  target_link_libraries(xtq_shim PRIVATE CUDA::cudart_static)
  # The nccl back-end: NCCL itself is dlopen'ed when a communicator opens.
  target_sources(xtq_shim PRIVATE ${XTQ_SHIM_DIR}/backend_nccl.c)
  target_compile_definitions(xtq_shim PRIVATE XTQ_SHIM_HAVE_NCCL=1)
  target_link_libraries(xtq_shim PRIVATE ${CMAKE_DL_LIBS})
endif()
# The xtq back-end, where libxtq_coll is part of the build (apps/allreduce,
# configured before this file).
set(XTQ_SHIM_BACKENDS mpi)
if(TARGET xtq_coll)
  target_sources(xtq_shim PRIVATE ${XTQ_SHIM_DIR}/backend_xtq.c)
  target_compile_definitions(xtq_shim PRIVATE XTQ_SHIM_HAVE_XTQ=1)
  target_link_libraries(xtq_shim PRIVATE xtq_coll)
  list(APPEND XTQ_SHIM_BACKENDS xtq)
else()
  message(STATUS "cntk-shim: libxtq_coll not in this build; back-end xtq not built")
endif()
# The tests (tests/integration/cntk_shim.cmake) run every back-end built.
set_property(GLOBAL PROPERTY XTQ_SHIM_BACKENDS ${XTQ_SHIM_BACKENDS})

# The PyTorch hook and its example, beside the library.
foreach(py xtq_shim.py train_ddp.py)
  configure_file(${XTQ_SHIM_DIR}/python/${py} ${XTQ_SHIM_OUT}/${py} COPYONLY)
endforeach()

# The aggregation benchmark: one aggregate per back-end, same process.
add_executable(xtq_shim_bench ${XTQ_SHIM_DIR}/shim_bench.c)
target_compile_definitions(xtq_shim_bench PRIVATE _GNU_SOURCE)
target_compile_options(xtq_shim_bench PRIVATE ${XTQ_WARNINGS})
target_link_libraries(xtq_shim_bench PRIVATE xtq_shim xtq_bench_harness)
set_target_properties(xtq_shim_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${XTQ_SHIM_OUT})
if(XTQ_HAVE_CUDA)
  target_compile_definitions(xtq_shim_bench PRIVATE XTQ_SHIM_BENCH_CUDA=1)
  target_link_libraries(xtq_shim_bench PRIVATE CUDA::cudart_static)
endif()

# The trainer (needs zlib's headers: zlib1g-dev).
find_package(ZLIB)
if(NOT ZLIB_FOUND)
  message(STATUS "cntk-shim: zlib not found (install zlib1g-dev); xtq_train is not built")
  return()
endif()
set(xtq_train_sources ${XTQ_SHIM_DIR}/train/xtq_train.c ${XTQ_SHIM_DIR}/train/idx.c
    ${XTQ_SHIM_DIR}/train/mlp.c ${XTQ_SHIM_DIR}/train/model_cpu.c ${XTQ_SHIM_DIR}/train/gemm.c)
if(XTQ_HAVE_CUDA)
  list(APPEND xtq_train_sources ${XTQ_SHIM_DIR}/train/model_cuda.cu)
else()
  list(APPEND xtq_train_sources ${XTQ_SHIM_DIR}/train/model_cuda_none.c)
endif()
add_executable(xtq_train ${xtq_train_sources})
target_compile_definitions(xtq_train PRIVATE _GNU_SOURCE)
target_compile_options(xtq_train PRIVATE $<$<COMPILE_LANGUAGE:C>:${XTQ_WARNINGS} -O3>)
target_link_libraries(xtq_train PRIVATE xtq_shim ZLIB::ZLIB m)
set_target_properties(xtq_train PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${XTQ_SHIM_OUT})
if(XTQ_HAVE_CUDA)
  set_target_properties(xtq_train PROPERTIES CUDA_STANDARD 17 LINKER_LANGUAGE CUDA)
  target_compile_options(xtq_train PRIVATE
                         $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
  target_link_libraries(xtq_train PRIVATE CUDA::cublas CUDA::cudart_static)
  xtq_cuda_host_only_flags(xtq_train)
endif()

# The tests' data generator: small gzip IDX sets, intact or corrupted.
add_executable(xtq_train_mkdata ${XTQ_SHIM_DIR}/tests/mkdata.c ${XTQ_SHIM_DIR}/train/idx.c)
target_include_directories(xtq_train_mkdata PRIVATE ${XTQ_SHIM_DIR}/train)
target_compile_definitions(xtq_train_mkdata PRIVATE _GNU_SOURCE)
target_compile_options(xtq_train_mkdata PRIVATE ${XTQ_WARNINGS})
target_link_libraries(xtq_train_mkdata PRIVATE xtq_shim ZLIB::ZLIB)
set_target_properties(xtq_train_mkdata PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${XTQ_SHIM_OUT})
