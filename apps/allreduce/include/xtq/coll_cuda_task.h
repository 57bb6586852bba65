/*
 * What libxtq_coll's CUDA task reads: its kernel arguments. Plain C: the
 * library fills them on the host; the task itself, xtq_coll_cuda_task, is
 * in <xtq/coll_cuda.cuh>, for task modules that hold it beside their own
 * tasks (one module per CUDA agent: docs/allreduce.md, "Sharing the CUDA
 * module").
 */
#ifndef XTQ_COLL_CUDA_TASK_H
#define XTQ_COLL_CUDA_TASK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What one dispatch of the task does to each of its `count` elements. */
enum xtq_coll_cuda_mode {
    XTQ_COLL_CUDA_REDUCE = 0,      /**< dst = dst op in */
    XTQ_COLL_CUDA_REDUCE_IN_A = 1, /**< dst = in op a */
    XTQ_COLL_CUDA_REDUCE_A_IN = 2, /**< dst = a op in */
    XTQ_COLL_CUDA_COPY = 3,        /**< dst = in */
    XTQ_COLL_CUDA_WAIT = 5,
};

/** The task's kernel arguments (one work-item per element). */
struct xtq_coll_cuda_args {
    uint64_t dst;    /**< device */
    uint64_t in;     /**< the piece: pinned host (where it landed) or device */
    uint64_t a;      /**< device (REDUCE_IN_A, REDUCE_A_IN) */
    uint64_t mirror; /**< pinned host copy of dst, or 0 */
    uint64_t count;
    uint32_t mode, type, op, esize; /**< enum xtq_coll_cuda_mode, xtq_datatype, xtq_op, bytes */
    /**
     * A sender's ready word (64 bits, device memory, a peer GPU's mapped
     * one included), or 0: the task first waits until it holds ready_val
     * or more (`in` is then written), for at most ready_ns nanoseconds;
     * past that the dispatch fails with -XTQ_ETIMEDOUT, also written to
     * `fail`.
     */
    uint64_t ready;
    uint64_t ready_val;
    uint64_t ready_ns;
    uint64_t fail; /**< mapped host int32_t: a failed wait's error (0: none) */
    /**
     * The ready word this task advances (its own GPU's), or 0: each
     * work-item adds the elements it wrote, after a system-scope fence,
     * so the word reaches a known total once the task's range (in `mirror`
     * or, without one, in `dst`) is written.
     */
    uint64_t mirror_count;
    /**
     * A uint32_t in this GPU's memory, or 0: while the task waits for
     * `ready`, a nonzero value here (read every 64 polls) ends the wait
     * (the team failed: a peer is gone or reported an error), and the
     * dispatch fails with -XTQ_ECANCELED, also written to `fail`.
     */
    uint64_t cancel;
};

#ifdef __cplusplus
}
#endif

#endif /* XTQ_COLL_CUDA_TASK_H */
