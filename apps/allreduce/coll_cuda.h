/*
 * libxtq_coll's CUDA teams, the C face of coll_cuda.cu: device memory, and
 * the reduction of one arriving piece into device memory run on the CUDA
 * agent (a dispatch of the module's task into a local queue, waited for),
 * its result also written to a pinned host mirror from which the next
 * step's put is sent. Without nvcc, coll_cuda_none.c refuses with the
 * reason (-XTQ_ENOAGENT).
 */
#ifndef XTQ_COLL_CUDA_H
#define XTQ_COLL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <xtq/xtq.h>
#include <xtq/coll_cuda_task.h>

#ifdef __cplusplus
extern "C" {
#endif

struct coll_gpu;

/* Get ready on the context's CUDA agent. `task`: the address of
 * xtq_coll_cuda_task in a module the caller attached (0: attach
 * libxtq_coll's own module). */
int coll_gpu_open(xtq_ctx_t *ctx, uint64_t task, int dev, struct coll_gpu **g, char *why,
                  size_t len);
void coll_gpu_close(struct coll_gpu *g);
int coll_gpu_supported(int op, int type);

void *coll_gpu_alloc(struct coll_gpu *g, size_t bytes); /* device; NULL on failure */
void coll_gpu_free(struct coll_gpu *g, void *p);
void *coll_gpu_host_alloc(struct coll_gpu *g, size_t bytes); /* pinned, mapped */
void coll_gpu_host_free(struct coll_gpu *g, void *p);
int coll_gpu_register(struct coll_gpu *g, void *p, size_t bytes); /* host memory the GPU reads */
void coll_gpu_deregister(struct coll_gpu *g, void *p, size_t bytes);
/* A copy in any direction on the team's stream (the caller's thread); with
 * `wait`, waited for together with every copy queued before it. */
int coll_gpu_copy(struct coll_gpu *g, void *dst, const void *src, size_t bytes, int wait);
/* Run one piece's reduction on the agent and wait (an agent worker). */
int coll_gpu_apply(struct coll_gpu *g, const struct xtq_coll_cuda_args *a, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_COLL_CUDA_H */
