/*
 * Reduction and test kernels the apps need, written once for NVIDIA (nvcc)
 * and AMD (hipcc). This header holds the argument block every kernel takes
 * and, when a GPU compiler includes it, the small portability layer.
 *
 * Argument block (the kernarg segment on AMD, the task's kernarg on the
 * CUDA agent): arguments 0 and 1 are pointers, rewritten by the XTQ engine
 * to the registered target buffer and the payload; argument 2 is a count
 * (or a value) the initiator chooses.
 *
 * Geometry: one work-item per element, grid_size_x >= count. On AMD the
 * kernels read the work-group size from the AQL dispatch packet itself, so
 * they need none of the runtime's hidden arguments (code object v5 keeps
 * blockDim there); a dispatch may leave those bytes zero. The code
 * object's KERNARG_SEGMENT_SIZE still counts them: an XTQ put sends that
 * many kernel-argument bytes (see docs/rocr.md).
 */
#ifndef XTQ_KERNELS_H
#define XTQ_KERNELS_H

#include <stdint.h>

/* Host and device agree on this layout: 24 bytes, 8-byte aligned. */
struct xtq_kernel_args {
    void *target;        /* argument 0: registered target buffer */
    const void *payload; /* argument 1: the payload where it landed */
    uint64_t count;      /* argument 2: elements, or the increment */
};

/* Kernel names, as symbols in the AMD code object (extern "C") and as
 * CUDA agent task names (<name>_xtq_task). */
#define XTQ_KERNEL_SUM_F32 "xtq_sum_f32"         /* target[i] += payload[i], float  */
#define XTQ_KERNEL_SUM_F64 "xtq_sum_f64"         /* target[i] += payload[i], double */
#define XTQ_KERNEL_COPY_U32 "xtq_copy_u32"       /* target[i]  = payload[i], record */
#define XTQ_KERNEL_INCREMENT "xtq_increment_u64" /* *target += count, once        */

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
/* ---- AMD (hipcc) ---------------------------------------------------------- */
#include <hip/hip_runtime.h>
#define XTQ_KERNEL_AMD 1
#define XTQ_DEVICE __device__ __forceinline__
/* The AQL packet that launched us: workgroup_size_x at byte 4, grid_size_x
 * at byte 12 (hsa_kernel_dispatch_packet_t). */
static XTQ_DEVICE uint64_t xtq_global_id_x(void)
{
    const uint16_t *pkt = (const uint16_t *)__builtin_amdgcn_dispatch_ptr();
    return (uint64_t)__builtin_amdgcn_workgroup_id_x() * pkt[2] + __builtin_amdgcn_workitem_id_x();
}
static XTQ_DEVICE unsigned long long xtq_atomic_add_u64(uint64_t *p, uint64_t v)
{
    return __hip_atomic_fetch_add((unsigned long long *)p, (unsigned long long)v,
                                  __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
#elif defined(__CUDACC__)
/* ---- NVIDIA (nvcc) ---------------------------------------------------------- */
#define XTQ_KERNEL_CUDA 1
#define XTQ_DEVICE __device__ __forceinline__
static XTQ_DEVICE uint64_t xtq_global_id_x(void)
{
    return (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static XTQ_DEVICE unsigned long long xtq_atomic_add_u64(uint64_t *p, uint64_t v)
{
    /* System scope: the target buffer may be host memory another agent reads. */
    return atomicAdd_system((unsigned long long *)p, (unsigned long long)v);
}
#endif

#endif /* XTQ_KERNELS_H */
