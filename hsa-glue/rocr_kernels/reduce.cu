/*
 * The reduction and test kernels, one source for nvcc and hipcc.
 *
 * Each kernel is a __device__ body over one element index. It is exported
 * in the form each agent runs:
 *  - AMD (hipcc --genco): an extern "C" __global__ kernel taking the
 *    argument block by value, i.e. as its kernarg segment; the ROCr agent
 *    loads it with xtq_kernel_create_rocr(agent, "xtq_kernels.hsaco",
 *    "xtq_sum_f32", &k).
 *  - NVIDIA (nvcc): a CUDA agent task (<name>_xtq_task, see xtq/cuda.h),
 *    called per work-item by the persistent command processor, and a plain
 *    __global__ kernel <name>_kernel for the HSA-mode baseline that the
 *    host launches itself.
 */
#include "xtq_kernels.h"

#ifdef XTQ_KERNEL_CUDA
#include <xtq/cuda.h>
#endif

static XTQ_DEVICE void sum_f32_body(const struct xtq_kernel_args *a, uint64_t i)
{
    if (i < a->count)
        ((float *)a->target)[i] += ((const float *)a->payload)[i];
}

static XTQ_DEVICE void sum_f64_body(const struct xtq_kernel_args *a, uint64_t i)
{
    if (i < a->count)
        ((double *)a->target)[i] += ((const double *)a->payload)[i];
}

static XTQ_DEVICE void copy_u32_body(const struct xtq_kernel_args *a, uint64_t i)
{
    if (i < a->count)
        ((uint32_t *)a->target)[i] = ((const uint32_t *)a->payload)[i];
}

static XTQ_DEVICE void increment_body(const struct xtq_kernel_args *a, uint64_t i)
{
    if (i == 0)
        xtq_atomic_add_u64((uint64_t *)a->target, a->count);
}

#if defined(XTQ_KERNEL_AMD)
#define XTQ_EXPORT_KERNEL(name, body)                                                      \
    extern "C" __global__ void name(struct xtq_kernel_args a)                              \
    {                                                                                      \
        body(&a, xtq_global_id_x());                                                       \
    }
#elif defined(XTQ_KERNEL_CUDA)
#define XTQ_EXPORT_KERNEL(name, body)                                                      \
    extern "C" __global__ void name##_kernel(struct xtq_kernel_args a)                     \
    {                                                                                      \
        body(&a, xtq_global_id_x());                                                       \
    }                                                                                      \
    __device__ void name##_task(const xtq_cuda_dispatch_t *d, void *kernarg)              \
    {                                                                                      \
        uint64_t i = (uint64_t)d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0]; \
        body((const struct xtq_kernel_args *)kernarg, i);                                  \
    }                                                                                      \
    __device__ xtq_cuda_task_fn name##_xtq_task = name##_task;
#endif

XTQ_EXPORT_KERNEL(xtq_sum_f32, sum_f32_body)
XTQ_EXPORT_KERNEL(xtq_sum_f64, sum_f64_body)
XTQ_EXPORT_KERNEL(xtq_copy_u32, copy_u32_body)
XTQ_EXPORT_KERNEL(xtq_increment_u64, increment_body)
