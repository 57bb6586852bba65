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

#ifdef __cplusplus
extern "C" {
#endif

struct coll_gpu;

enum coll_gpu_mode {
    COLL_GPU_REDUCE = 0,      /* dst = dst op in */
    COLL_GPU_REDUCE_IN_A = 1, /* dst = in op a */
    COLL_GPU_REDUCE_A_IN = 2, /* dst = a op in */
    COLL_GPU_COPY = 3,        /* dst = in */
};

/* What one task of the module does; its kernel arguments. */
struct coll_gpu_args {
    uint64_t dst;    /* device */
    uint64_t in;     /* the piece: pinned host (where it landed) or device */
    uint64_t a;      /* device (REDUCE_IN_A, REDUCE_A_IN) */
    uint64_t mirror; /* pinned host copy of dst, or 0 */
    uint64_t count;
    uint32_t mode, type, op, esize;
};

/* Attach the module to the context's CUDA agent and get ready. */
int coll_gpu_open(xtq_ctx_t *ctx, struct coll_gpu **g, char *why, size_t len);
void coll_gpu_close(struct coll_gpu *g);
int coll_gpu_supported(int op, int type);

void *coll_gpu_alloc(struct coll_gpu *g, size_t bytes); /* device; NULL on failure */
void coll_gpu_free(struct coll_gpu *g, void *p);
void *coll_gpu_host_alloc(struct coll_gpu *g, size_t bytes); /* pinned, mapped */
void coll_gpu_host_free(struct coll_gpu *g, void *p);
int coll_gpu_register(struct coll_gpu *g, void *p, size_t bytes); /* host memory the GPU reads */
void coll_gpu_deregister(struct coll_gpu *g, void *p, size_t bytes);
/* A copy in any direction, waited for (the caller's thread). */
int coll_gpu_copy(struct coll_gpu *g, void *dst, const void *src, size_t bytes);
/* Run one piece's reduction on the agent and wait (an agent worker). */
int coll_gpu_apply(struct coll_gpu *g, const struct coll_gpu_args *a, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_COLL_CUDA_H */
