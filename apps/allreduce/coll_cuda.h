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

/* How a team submits its GPU work (XTQ_COLL_GPU_INLINE,
 * XTQ_COLL_GPU_COPY_MAX; docs/allreduce.md). */
struct coll_gpu_opts {
    int inline_args; /* arguments and small host pieces in the queue slot */
    size_t copy_max; /* copies up to this many bytes run on the processor */
    int chain;       /* XTQ_COLL_GPU_CHAIN: coll_gpu_start_signal may be used */
    uint32_t grid_min; /* XTQ_CUDA_GRID_MIN where XTQ_COLL_GPU_GRID is on:
                        * groups from which the processor launches a grid
                        * over the whole GPU (0: never) */
};

/* Get ready on the context's CUDA agent. `task`: the address of
 * xtq_coll_cuda_task in a module the caller attached (0: attach
 * libxtq_coll's own module). */
int coll_gpu_open(xtq_ctx_t *ctx, uint64_t task, int dev, const struct coll_gpu_opts *o,
                  struct coll_gpu **g, char *why, size_t len);
void coll_gpu_close(struct coll_gpu *g);
int coll_gpu_supported(int op, int type);

void *coll_gpu_alloc(struct coll_gpu *g, size_t bytes); /* device; NULL on failure */
void coll_gpu_free(struct coll_gpu *g, void *p);
void *coll_gpu_host_alloc(struct coll_gpu *g, size_t bytes); /* pinned, mapped */
void coll_gpu_host_free(struct coll_gpu *g, void *p);
int coll_gpu_register(struct coll_gpu *g, void *p, size_t bytes); /* host memory the GPU reads */
void coll_gpu_deregister(struct coll_gpu *g, void *p, size_t bytes);
/* A copy in any direction (host, device, a peer's mapped memory) on the
 * team's stream; with `wait`, waited for together with every copy queued
 * before it. */
int coll_gpu_copy(struct coll_gpu *g, void *dst, const void *src, size_t bytes, int wait);
/* Copies of at most this many bytes between device and mapped memory run
 * on the processor (a COPY task) instead (0: none). */
size_t coll_gpu_copy_max(const struct coll_gpu *g);
/* Start one task (a reduction or a copy: a->mode) on the agent: a ticket
 * (>= 0) for coll_gpu_finish, or an error (-XTQ_ECANCELED: one that waits,
 * after coll_gpu_cancel_waits). `payload`: bytes of host
 * memory at a->in that may travel with the packet (0 when a->in is device
 * memory). Tasks run in the order they were started. */
int coll_gpu_start(struct coll_gpu *g, const struct xtq_coll_cuda_args *a, uint64_t payload,
                   int64_t timeout_ns);
/* Wait for a started task and give its ticket back. */
int coll_gpu_finish(struct coll_gpu *g, int ticket, int64_t timeout_ns);
/* Whether a task's completion may decrement any host signal (the agent's
 * retire thread does it: a GPU without native host atomics) with the
 * arguments carried in the queue slot, and XTQ_COLL_GPU_CHAIN is on. */
int coll_gpu_can_chain(const struct coll_gpu *g);
/* Start one task whose completion decrements `sig` by one and nothing
 * else: nobody waits for it (an engine trigger on `sig` may). `args`:
 * pinned memory of the caller's that stays valid until the task ran. */
int coll_gpu_start_signal(struct coll_gpu *g, const struct xtq_coll_cuda_args *a,
                          struct xtq_coll_cuda_args *args, xtq_signal_t *sig, int64_t timeout_ns);
/* Wait until every task started before this call ran. */
int coll_gpu_fence(struct coll_gpu *g, int64_t timeout_ns);
/* Peer reads (CUDA IPC, XTQ_COLL_GPU_PEER): device memory that other ranks
 * of the host map (its 64-byte handle), mapped here from a peer's handle,
 * and unmapped; all with the processor paused. -XTQ_ENOSYS: the device or
 * driver cannot (the team then sends from pinned host mirrors).
 * coll_gpu_ipc_open maps a peer's buffer that must hold `bytes` from *ptr
 * on (what the peer claims, or what the caller will touch): where the
 * mapped allocation (cuMemGetAddressRange) holds less, it is unmapped
 * again and the call fails with -XTQ_ERANGE, *mapped (may be NULL) saying
 * how many bytes it held. */
#define COLL_GPU_IPC_HANDLE 64
int coll_gpu_ipc_alloc(struct coll_gpu *g, size_t bytes, void **ptr, void *handle);
void coll_gpu_ipc_free(struct coll_gpu *g, void *ptr);
int coll_gpu_ipc_open(struct coll_gpu *g, const void *handle, uint64_t bytes, void **ptr,
                      uint64_t *mapped);
void coll_gpu_ipc_close(struct coll_gpu *g, void *ptr);
/* Run a task that waits until the 64-bit device word `word` (a peer's,
 * mapped) holds `val`, for at most `wait_ns`: 0, -XTQ_ETIMEDOUT,
 * -XTQ_ECANCELED (coll_gpu_cancel_waits), or the submission's error. A
 * task with xtq_coll_cuda_args.ready set waits the same way before it
 * reads; its failure is coll_gpu_finish's result. */
int coll_gpu_wait_ready(struct coll_gpu *g, const void *word, uint64_t val, int64_t wait_ns,
                        int64_t timeout_ns);
/* End every wait of a task started here, now and later, at once (the
 * team failed: its waits would only hold the processor until their bound,
 * or for ever without one). A task waiting now fails with -XTQ_ECANCELED
 * on the GPU; a task that would wait (xtq_coll_cuda_args.ready,
 * coll_gpu_wait_ready) started later fails with it at coll_gpu_start,
 * submitted nowhere, whether its word is ready or not. For good: nothing
 * resets it, since a failed team runs no more collectives until it is
 * destroyed (<xtq/coll.h>), and with it this object; a new team opens its
 * own. Tasks that do not wait (reductions, copies, coll_gpu_fence) still
 * run: a failed call waits for its copies before its buffers go back. */
void coll_gpu_cancel_waits(struct coll_gpu *g);
/* Start and finish one piece's reduction (an agent worker). */
int coll_gpu_apply(struct coll_gpu *g, const struct xtq_coll_cuda_args *a, uint64_t payload,
                   int64_t timeout_ns);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_COLL_CUDA_H */
