# AMD code objects for hsa-glue/rocr_kernels/reduce.cu, built by hipcc where ROCm's
# compiler is installed (the NVIDIA side of the same source is built by the
# CUDA agent's rules in hsa-glue/cuda.cmake). One .hsaco per ISA, because
# the HSA code-object reader takes a single-ISA code object, not a bundle:
#   ${CMAKE_BINARY_DIR}/kernels/xtq_kernels-<gfx>.hsaco
# --no-gpu-bundle-output: a plain ELF, not a clang offload bundle.
# -nogpulib: the kernels call no device-library function, so any ISA the
# compiler knows builds, whatever device libraries are installed.
# XTQ_KERNELS_HSACO_DIR tells tests and tools where they are ("" if none).
find_program(XTQ_HIPCC NAMES hipcc PATHS /opt/rocm/bin)
set(XTQ_HIP_ARCHS "gfx908;gfx90a;gfx1030;gfx1100" CACHE STRING
    "AMD GPU ISAs to build xtq_kernels-<isa>.hsaco for (build/kernels/)")

if(NOT XTQ_HIPCC)
  message(STATUS "libxtq: hipcc not found; AMD kernel code objects (hsa-glue/rocr_kernels/reduce.cu) not built")
  set(XTQ_KERNELS_HSACO_DIR "" CACHE INTERNAL "")
  return()
endif()

set(xtq_kernels_dir ${CMAKE_BINARY_DIR}/kernels)
set(xtq_kernels_src ${CMAKE_CURRENT_LIST_DIR}/reduce.cu)
set(xtq_hsaco_files)
foreach(arch IN LISTS XTQ_HIP_ARCHS)
  set(out ${xtq_kernels_dir}/xtq_kernels-${arch}.hsaco)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${xtq_kernels_dir}
    COMMAND ${CMAKE_COMMAND} -E env HIP_PLATFORM=amd
            ${XTQ_HIPCC} --genco --offload-arch=${arch} -nogpulib --no-gpu-bundle-output
            -O3 -Wall -Werror
            -I${PROJECT_SOURCE_DIR}/include -I${CMAKE_CURRENT_LIST_DIR}
            -o ${out} ${xtq_kernels_src}
    DEPENDS ${xtq_kernels_src} ${CMAKE_CURRENT_LIST_DIR}/xtq_kernels.h
    COMMENT "hipcc: rocr_kernels/reduce.cu -> xtq_kernels-${arch}.hsaco"
    VERBATIM)
  list(APPEND xtq_hsaco_files ${out})
endforeach()
add_custom_target(xtq_kernels_hsaco ALL DEPENDS ${xtq_hsaco_files})
set(XTQ_KERNELS_HSACO_DIR ${xtq_kernels_dir} CACHE INTERNAL "")
install(FILES ${xtq_hsaco_files} DESTINATION ${CMAKE_INSTALL_LIBDIR}/xtq)
message(STATUS "libxtq: hipcc ${XTQ_HIPCC}: AMD kernels for ${XTQ_HIP_ARCHS}")
