# ROCr agent: white-box (INTERNAL) cases. Where no AMD GPU is present they
# SKIP with the probe's reason, except the ones that check honest absence,
# the runtime's entry points and the AQL layout against hsa.h.
xtq_add_runner(rocr LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rocr.c INTERNAL)
target_compile_definitions(test_rocr PRIVATE
  XTQ_KERNELS_HSACO_DIR="${XTQ_KERNELS_HSACO_DIR}")
