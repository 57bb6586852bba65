/*
 * The receive side of one collective instance on host memory: each
 * receive of the schedule runs once both its message has arrived and the
 * earlier receives it depends on have run ("the last to arrive runs it").
 * A message that comes before its receive can run is copied into the
 * instance's stash and run from there later; one that finds it ready runs
 * at once from where it landed. Shared by the CPU agent's task (coll.c)
 * and the all-ranks simulator of the tests, which drives it in random
 * orders.
 *
 * Thread safety: arrivals and completions may run on several threads at
 * once (CPU-agent workers); one atomic word per receive decides who runs it.
 */
#ifndef XTQ_COLL_EXEC_H
#define XTQ_COLL_EXEC_H

#include <stdatomic.h>

#include "coll_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COLL_RS_PREDS   0x00ffffffu
#define COLL_RS_ARRIVED (1u << 24)
#define COLL_RS_DONE    (1u << 25)

struct coll_exec;

/*
 * Where a message's elements are: in local memory (`local`), or still in
 * the sender's memory, read on demand by `read` (same-host teams: the
 * receiving task copies straight from the sender, as Open MPI's vader
 * does with CMA). `read` copies `bytes` from byte `off` of the message to
 * `dst` and returns 0 or -XTQ_E*.
 */
struct coll_src {
    const void *local;
    int (*read)(const struct coll_src *src, uint64_t off, void *dst, size_t bytes);
    void *ctx;
    uint64_t addr;
    /* `local` is device memory (a peer GPU's, mapped): the apply hook
     * takes it in place; `read` copies it out when it must be kept. */
    int device;
    /* Device memory written only once this device word (the sender's, mapped)
     * holds ready_val (NULL: written already). */
    const void *ready;
    uint64_t ready_val;
};

/* What a receive's completion does outside the receive side. */
struct coll_exec_ops {
    /* One of the receives that send `send_index` waits for has run. */
    void (*dep_done)(struct coll_exec *e, uint32_t send_index);
    /* Receive `recv_index` has run (after its successors were notified). */
    void (*recv_done)(struct coll_exec *e, uint32_t recv_index);
};

struct coll_exec {
    const struct coll_sched *s;
    const struct coll_exec_ops *ops;
    void *user;
    enum xtq_datatype type;
    enum xtq_op op;
    size_t esize;
    void *buf[COLL_BUF_COUNT];
    /* A device team's data path: runs the receive's data operation
     * instead of the host code (NULL: host memory, xtq_reduce_local);
     * `device_src`: `in` is that source's device memory (NULL: host). */
    int (*apply_hook)(struct coll_exec *e, const struct coll_op *op, const void *in,
                      const struct coll_src *device_src);
    _Atomic uint32_t *rstate; /* per receive: preds left | ARRIVED | DONE */
    const void **rstash;      /* per receive: where its stashed message is */
    uint8_t *stash;
    uint64_t stash_cap;
    /* Bytes a reduction reads from a remote source at a time (0: 64 KiB,
     * and never more; tests set it small to cut pieces into chunks). */
    uint64_t chunk_bytes;
    _Atomic uint64_t stash_used;
    _Atomic uint64_t stash_peak; /* bytes stashed in all, for tests */
    _Atomic int error;           /* first error (-XTQ_E*) */
};

/* Allocate the per-receive state of an instance of `s` (stash: caller's). */
int coll_exec_alloc(struct coll_exec *e, const struct coll_sched *s);
void coll_exec_free(struct coll_exec *e);

/* Arm for a new instance: every receive waits for its dependencies. The
 * stash is left alone: messages kept before the post are in it. */
void coll_exec_reset(struct coll_exec *e);

/* Room in the stash for `bytes`, or NULL (the stash is full: an error). */
void *coll_exec_stash_alloc(struct coll_exec *e, uint64_t bytes);

/*
 * The message of receive `ri` has arrived with `data` (its length was
 * checked by the caller). Runs it now, or stashes a copy for later.
 * `stashed`: data already lies in the stash (a message kept before the
 * post). Returns 0 or -XTQ_ENOSPC (stash full), -XTQ_EPROTO (arrived twice).
 */
int coll_exec_arrive(struct coll_exec *e, uint32_t ri, const void *data, int stashed);

/*
 * The same for a message whose elements may still be in the sender's
 * memory (src->read set): a copying receive that can run reads them
 * straight into place (one copy), a reducing one through a small
 * cache-resident buffer of the calling thread, one that cannot run yet
 * into the stash. Every read happens before this returns. A failed read
 * fails the instance (coll_exec_fail); one into the stash is also returned.
 */
int coll_exec_arrive_src(struct coll_exec *e, uint32_t ri, const struct coll_src *src);

/* Copy `bytes` of `src` from byte `off` to `dst` (memcpy or src->read). */
int coll_src_copy(const struct coll_src *src, uint64_t off, void *dst, size_t bytes);

/* Record the first error of the instance. */
void coll_exec_fail(struct coll_exec *e, int err);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_COLL_EXEC_H */
