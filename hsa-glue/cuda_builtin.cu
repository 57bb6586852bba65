/*
 * libxtq's own processor: it serves the CUDA agent's queues while no task
 * module is attached (barrier packets run; kernel packets complete with
 * -XTQ_ENOKERNEL), and is the one a module replaces when it attaches.
 */
#include <xtq/cuda_processor.cuh>

#include "cuda_builtin.h"

XTQ_CUDA_MODULE(xtq__builtin)
