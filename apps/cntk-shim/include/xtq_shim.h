/*
 * xtq_shim: CNTK's DistributedCommunicator in C, for data-parallel
 * training (the paper's Section V-D).
 *
 * A communicator knows its workers and the current worker, aggregates
 * (sums) lists of gradient buffers in place or from inputs to outputs,
 * synchronously or with a handle to wait on, and has a barrier. Buffers
 * smaller than the pack threshold (XTQ_SHIM_PACK_BYTES, 32 KiB) that
 * share a type and a memory kind travel packed in one buffer, as CNTK
 * packs small gradients: one collective instead of many.
 *
 * The collective itself is a back-end chosen at run time
 * (XTQ_SHIM_BACKEND, or xtq_shim_attr_t.backend):
 *   mpi  MPI_Allreduce / MPI_Iallreduce on a duplicate of MPI_COMM_WORLD;
 *        device buffers are staged through pinned host memory.
 *   xtq  libxtq_coll (apps/allreduce): reductions run as tasks on CPU
 *        agents, or on CUDA agents for device buffers.
 *   nccl ncclAllReduce (libnccl.so.2, loaded at run time) on device
 *        buffers, one GPU per rank (current at the first aggregate);
 *        host buffers through MPI_Allreduce: the GPU reference to
 *        compare XTQ with.
 * Both give the same sums up to the order of floating-point additions, so
 * a user compares them on the spot by changing one variable.
 *
 * Element types and operations are libxtq's (<xtq/reduce.h>). Functions
 * return 0 or a negative XTQ_E* code (xtq_strerror()). Collective calls
 * must be made by every worker in the same order with matching buffer
 * lists; XTQ_SHIM_CHECK=1 verifies that on each call (-XTQ_EINVAL on every
 * worker when they differ). A communicator is used by one thread at a
 * time.
 */
#ifndef XTQ_SHIM_H
#define XTQ_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <xtq/error.h>
#include <xtq/reduce.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(XTQ_SHIM_BUILDING)
#define XTQ_SHIM_API __attribute__((visibility("default")))
#else
#define XTQ_SHIM_API
#endif

/** Where a buffer lives. */
enum xtq_shim_mem {
    XTQ_SHIM_MEM_HOST = 0, /**< host memory (pageable or pinned) */
    XTQ_SHIM_MEM_CUDA = 1, /**< CUDA device memory of the current device */
};

/**
 * A gradient tensor as the communicator sees it (CNTK's NDArrayView):
 * `count` contiguous elements of `type` at `data`.
 * Device buffers must be ready when a call starts (the caller has
 * synchronised the stream that wrote them); results are ready when the
 * call (or xtq_shim_wait) returns.
 */
typedef struct xtq_shim_buf {
    void *data;
    size_t count;
    enum xtq_datatype type;
    enum xtq_shim_mem mem;
} xtq_shim_buf_t;

/** CNTK's DistributedWorkerDescriptor. */
typedef struct xtq_shim_worker {
    size_t global_rank;
    char host_id[64]; /**< host name, truncated to 63 bytes */
} xtq_shim_worker_t;

/** Bits of xtq_shim_attr_t.field_mask: which fields the caller set. */
enum xtq_shim_attr_field {
    XTQ_SHIM_ATTR_FIELD_BACKEND = 1u << 0,    /**< backend */
    XTQ_SHIM_ATTR_FIELD_PACK_BYTES = 1u << 1, /**< pack_bytes */
    XTQ_SHIM_ATTR_FIELD_CHECK = 1u << 2,      /**< check */
    XTQ_SHIM_ATTR_FIELD_MPI_COMM = 1u << 3,   /**< mpi_comm */
    XTQ_SHIM_ATTR_FIELD_XTQ_CTX = 1u << 4,    /**< xtq_ctx */
};

/** Optional settings; only the fields named in `field_mask` are read. */
typedef struct xtq_shim_attr {
    uint64_t field_mask;
    const char *backend; /**< "mpi", "xtq" or "nccl"; overrides XTQ_SHIM_BACKEND */
    size_t pack_bytes;   /**< pack buffers below this size; overrides XTQ_SHIM_PACK_BYTES */
    int check;           /**< verify matching calls; overrides XTQ_SHIM_CHECK */
    /**
     * Address of an MPI_Comm whose processes are the workers (the mpi
     * back-end duplicates it); default MPI_COMM_WORLD. Kept as a pointer so
     * that this header does not need mpi.h.
     */
    const void *mpi_comm;
    /**
     * A libxtq context the xtq back-end runs its teams on (the
     * application's own, when it has one: one context per process); by
     * default the back-end creates one with xtq_init(NULL) and finalizes it.
     */
    xtq_ctx_t *xtq_ctx;
} xtq_shim_attr_t;

/** Counters since xtq_shim_init (this worker's view). */
typedef struct xtq_shim_stats {
    uint64_t aggregates;  /**< aggregate calls (sync and async) */
    uint64_t collectives; /**< back-end allreduces started (after packing) */
    uint64_t packed;      /**< buffers that travelled packed */
    uint64_t bytes;       /**< bytes reduced (sum over collectives) */
    uint64_t staged;      /**< device buffers staged through host memory */
    uint64_t wait_ns;     /**< time blocked in aggregate calls and waits */
} xtq_shim_stats_t;

typedef struct xtq_shim_comm xtq_shim_comm_t;
/** An asynchronous aggregate in flight. */
typedef struct xtq_shim_handle xtq_shim_handle_t;

/**
 * Create a communicator over all processes of the job. Collective.
 * The mpi back-end initialises MPI when the caller has not (and finalises
 * it at exit).
 * @return 0; -XTQ_ENOENT for an unknown back-end name; -XTQ_ENOSYS for a
 *         back-end this build does not have (the message says why).
 */
XTQ_SHIM_API int xtq_shim_init(const xtq_shim_attr_t *attr, xtq_shim_comm_t **comm);

/** Destroy a communicator (no aggregate may be in flight). Collective. */
XTQ_SHIM_API int xtq_shim_finalize(xtq_shim_comm_t *comm);

/** The back-end's name ("mpi", "xtq", "nccl"). */
XTQ_SHIM_API const char *xtq_shim_backend(const xtq_shim_comm_t *comm);

/**
 * Back-ends known to this build, by index: their name, whether they can
 * be used here, and if not why. Returns -XTQ_ERANGE past the last.
 */
XTQ_SHIM_API int xtq_shim_backend_info(unsigned index, const char **name, int *available,
                                       const char **why);

/** Number of workers and this worker's global rank. */
XTQ_SHIM_API size_t xtq_shim_size(const xtq_shim_comm_t *comm);
XTQ_SHIM_API size_t xtq_shim_rank(const xtq_shim_comm_t *comm);

/** All workers, ordered by global rank (CNTK's Workers()). */
XTQ_SHIM_API const xtq_shim_worker_t *xtq_shim_workers(const xtq_shim_comm_t *comm, size_t *count);

/** This worker (CNTK's CurrentWorker()). */
XTQ_SHIM_API const xtq_shim_worker_t *xtq_shim_current_worker(const xtq_shim_comm_t *comm);

/**
 * Sum each buffer over all workers, in place (CNTK's AggregateInPlace).
 * Collective. Types must support XTQ_OP_SUM.
 */
XTQ_SHIM_API int xtq_shim_aggregate_in_place(xtq_shim_comm_t *comm, const xtq_shim_buf_t *bufs,
                                             size_t n);

/**
 * out[i] = sum over workers of in[i] (CNTK's Aggregate). Each out[i] has
 * in[i]'s count, type and memory kind; it may be in[i] itself. Collective.
 */
XTQ_SHIM_API int xtq_shim_aggregate(xtq_shim_comm_t *comm, const xtq_shim_buf_t *in,
                                    const xtq_shim_buf_t *out, size_t n);

/**
 * Start an aggregate (out NULL: in place) and return at once; finish it
 * with xtq_shim_wait. The buffers must stay untouched until then. The
 * lists are copied, so they may be reused at once. Several aggregates may
 * be in flight; every worker starts them in the same order.
 */
XTQ_SHIM_API int xtq_shim_aggregate_async(xtq_shim_comm_t *comm, const xtq_shim_buf_t *in,
                                          const xtq_shim_buf_t *out, size_t n,
                                          xtq_shim_handle_t **handle);

/** Progress `handle`; *done is 1 once xtq_shim_wait would not block. */
XTQ_SHIM_API int xtq_shim_test(xtq_shim_handle_t *handle, int *done);

/**
 * Wait for an aggregate, copy its results into place and free the handle
 * (also when it returns an error).
 */
XTQ_SHIM_API int xtq_shim_wait(xtq_shim_handle_t *handle);

/**
 * General allreduce of one buffer: recv = op over workers of send (send
 * NULL or equal to recv: in place). Any pair xtq_reduce_supported()
 * accepts except XTQ_OP_REPLACE and XTQ_OP_NO_OP. Collective.
 */
XTQ_SHIM_API int xtq_shim_allreduce(xtq_shim_comm_t *comm, const void *send, void *recv,
                                    size_t count, enum xtq_datatype type, enum xtq_op op,
                                    enum xtq_shim_mem mem);

/** Wait until every worker has called it (CNTK's Barrier). */
XTQ_SHIM_API int xtq_shim_barrier(xtq_shim_comm_t *comm);

/** Copy the counters. */
XTQ_SHIM_API int xtq_shim_get_stats(const xtq_shim_comm_t *comm, xtq_shim_stats_t *stats);

/** The last error's message on this communicator ("" when none). */
XTQ_SHIM_API const char *xtq_shim_last_error(const xtq_shim_comm_t *comm);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_SHIM_H */
