/*
 * GPU tasks on the ROCr agent (AMD GPUs through the HSA runtime).
 *
 * A ROCr queue is a hardware AQL queue created with hsa_queue_create: the
 * engine writes the rewritten packet into its ring, publishes the header
 * and rings its doorbell signal; the GPU's command processor takes it from
 * there. Kernels are ordinary AMDGPU kernels loaded from a code object:
 *
 *     // kernel built by hipcc --genco (hsa-glue/rocr_kernels/reduce.cu: xtq_sum_f32)
 *     xtq_kernel_t *k;
 *     xtq_kernel_create_rocr(agent, "xtq_kernels.hsaco", "xtq_sum_f32", &k);
 *     xtq_register_kernel(ctx, 3, k, target_buffer, done_signal);
 *
 * The kernel's argument block is its kernarg segment: arguments 0 and 1 are
 * pointers (target buffer, payload), rewritten by the engine. Memory the
 * GPU reads or writes in place (target buffers in host memory, payloads)
 * must be registered with xtq_rocr_mem_register(); the engine registers its
 * own receive regions. This header needs no HSA header.
 */
#ifndef XTQ_ROCR_H
#define XTQ_ROCR_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

/**
 * Create a kernel object for a ROCr agent from an AMDGPU code object.
 * @param code_object_path a code object file (.hsaco, .co) built for the
 *        agent's ISA, e.g. by `hipcc --genco --offload-arch=gfx90a`.
 * @param symbol the kernel's name; "name.kd" is tried when "name" is not
 *        found (code object v3 and later name kernel descriptors so).
 * @return 0, -XTQ_EINVAL, -XTQ_EAGENTKIND (not a ROCr agent), -XTQ_ENOENT
 *         (file or symbol not found), -XTQ_EIO (the runtime refused the
 *         code object, e.g. wrong ISA), -XTQ_ENOMEM.
 */
XTQ_API int xtq_kernel_create_rocr(xtq_agent_t *agent, const char *code_object_path,
                                   const char *symbol, xtq_kernel_t **kernel);

/**
 * Make host memory readable and writable in place by the agent's GPU
 * (hsa_amd_memory_lock): target buffers and payloads in host memory. The
 * GPU must see it at the same address as the host does.
 * @return 0, -XTQ_EAGENTKIND, -XTQ_EINVAL, -XTQ_ENOSYS (the runtime mapped
 *         it at another address), -XTQ_EIO.
 */
XTQ_API int xtq_rocr_mem_register(xtq_agent_t *agent, void *addr, size_t len);

/** Undo xtq_rocr_mem_register(). */
XTQ_API int xtq_rocr_mem_deregister(xtq_agent_t *agent, void *addr, size_t len);

/**
 * Allocate kernel-argument memory from the agent's kernarg region, for
 * packets a local thread submits itself (XTQ puts carry their arguments in
 * the receive region instead).
 * @return 0, -XTQ_EAGENTKIND, -XTQ_ENOSYS (no kernarg region), -XTQ_ENOMEM.
 */
XTQ_API int xtq_rocr_kernarg_alloc(xtq_agent_t *agent, size_t size, void **ptr);

/** Free memory from xtq_rocr_kernarg_alloc(). */
XTQ_API int xtq_rocr_kernarg_free(xtq_agent_t *agent, void *ptr);

XTQ_EXTERN_C_END

#endif /* XTQ_ROCR_H */
