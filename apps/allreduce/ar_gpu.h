/*
 * The GPU side of xtq_allreduce, in C: device memory, copies, the
 * reduction kernel the HSA-mode path launches after each receive, and
 * NCCL through dlopen("libnccl.so.2"). ar_gpu.cu implements it with the
 * CUDA runtime; without CUDA every call fails with the reason "built
 * without CUDA" and the GPU paths print SKIP.
 */
#ifndef XTQ_AR_GPU_H
#define XTQ_AR_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when a device can be used (selected: local_rank % devices), else -1
 * with the reason in `why`. */
int ar_gpu_open(int local_rank, char *why, size_t len);
const char *ar_gpu_name(void);
int ar_gpu_count(void); /* devices visible to this process */
const char *ar_gpu_error(void);

void *ar_gpu_malloc(size_t bytes);
void ar_gpu_free(void *p);
void *ar_gpu_host_alloc(size_t bytes); /* pinned, mapped */
void ar_gpu_host_free(void *p);
int ar_gpu_h2d(void *dst, const void *src, size_t bytes);
int ar_gpu_d2h(void *dst, const void *src, size_t bytes);
int ar_gpu_d2d(void *dst, const void *src, size_t bytes);

/* dst[i] = dst[i] op src[i] on the GPU (src: device memory or pinned host
 * memory), launched on the path's stream; `wait` synchronises it. Types
 * and operations: those of <xtq/reduce.h> but the long double ones. */
int ar_gpu_reduce(void *dst, const void *src, uint64_t count, int type, int op, int wait);
int ar_gpu_sync(void);

/* NCCL (libnccl.so.2, declared here: no NCCL headers needed). */
int ar_nccl_open(char *why, size_t len);
int ar_nccl_unique_id_size(void);
int ar_nccl_get_unique_id(void *id);
int ar_nccl_init(int nranks, const void *id, int rank);
/* type: an xtq_datatype NCCL has (int8..uint64, half, bfloat16, float,
 * double); op: sum, prod, max, min. -1 when it has no such pair. */
int ar_nccl_allreduce(const void *sendbuf, void *recvbuf, size_t count, int type, int op);
void ar_nccl_close(void);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_AR_GPU_H */
