# ROCr agent (AMD GPUs through the HSA runtime, loaded with dlopen).
# Compiled against hsa.h when the top level found it (XTQ_HAVE_ROCR); the
# source is always built so the public xtq_rocr_* entry points exist and
# answer -XTQ_ENOAGENT in a build without hsa.h.
target_sources(xtq_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/rocr_agent.c)
if(XTQ_HAVE_ROCR)
  target_compile_definitions(xtq_obj PUBLIC XTQ_HAVE_ROCR_AGENT=1)
endif()

# The ROCr tests' and tools' kernels (rocr_kernels/): their AMD code
# objects, built by hipcc when installed.
include(${CMAKE_CURRENT_LIST_DIR}/rocr_kernels/kernels.cmake)
