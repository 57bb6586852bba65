/* The receive side of a collective instance (coll_exec.h). */
#include "coll_exec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <xtq/error.h>
#include <xtq/reduce.h>

int coll_exec_alloc(struct coll_exec *e, const struct coll_sched *s)
{
    uint32_t n = s->nrecvs ? s->nrecvs : 1;

    e->s = s;
    e->rstate = malloc(n * sizeof(*e->rstate));
    e->rstash = calloc(n, sizeof(*e->rstash));
    if (!e->rstate || !e->rstash) {
        coll_exec_free(e);
        return -XTQ_ENOMEM;
    }
    return 0;
}

void coll_exec_free(struct coll_exec *e)
{
    free((void *)e->rstate);
    free((void *)e->rstash);
    e->rstate = NULL;
    e->rstash = NULL;
}

void coll_exec_reset(struct coll_exec *e)
{
    const struct coll_sched *s = e->s;

    for (uint32_t r = 0; r < s->nrecvs; r++) {
        atomic_store_explicit(&e->rstate[r], s->ops[s->recv_op[r]].ndeps, memory_order_relaxed);
        e->rstash[r] = NULL;
    }
    atomic_store_explicit(&e->error, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

void coll_exec_fail(struct coll_exec *e, int err)
{
    int zero = 0;
    atomic_compare_exchange_strong(&e->error, &zero, err);
}

void *coll_exec_stash_alloc(struct coll_exec *e, uint64_t bytes)
{
    /* 16-byte alignment: the element types need at most that. */
    uint64_t len = (bytes + 15) & ~(uint64_t)15;
    uint64_t off = atomic_fetch_add_explicit(&e->stash_used, len, memory_order_relaxed);

    if (off + len > e->stash_cap || off + len < off)
        return NULL;
    uint64_t peak = atomic_load_explicit(&e->stash_peak, memory_order_relaxed);
    while (peak < off + len && !atomic_compare_exchange_weak(&e->stash_peak, &peak, off + len))
        ;
    return e->stash + off;
}

static void *at(const struct coll_exec *e, unsigned buf, uint64_t off)
{
    return (uint8_t *)e->buf[buf] + off * e->esize;
}

/* The data operation of one receive (`dsrc`: `in` is its device memory,
 * for the apply hook only). */
static void apply_in(struct coll_exec *e, const struct coll_op *op, const void *in,
                     const struct coll_src *dsrc)
{
    void *dst = at(e, op->buf, op->off);
    size_t bytes = op->cnt * e->esize;
    int rc = 0;

    if (op->cnt == 0)
        return;
    if (e->apply_hook) {
        rc = e->apply_hook(e, op, in, dsrc);
        if (rc)
            coll_exec_fail(e, rc);
        return;
    }
    switch (op->type) {
    case COLL_OP_RECV_REDUCE:
        rc = xtq_reduce_local(e->op, e->type, dst, in, op->cnt);
        break;
    case COLL_OP_RECV_REDUCE_TO: {
        /* Lower rank's operand first on both partners: the same bits. */
        const void *a = at(e, op->abuf, op->aoff);
        memcpy(dst, op->in_first ? in : a, bytes);
        rc = xtq_reduce_local(e->op, e->type, dst, op->in_first ? a : in, op->cnt);
        break;
    }
    case COLL_OP_RECV_COPY:
        memcpy(dst, in, bytes);
        break;
    default:
        break;
    }
    if (rc)
        coll_exec_fail(e, rc);
}

static void apply(struct coll_exec *e, const struct coll_op *op, const void *in)
{
    apply_in(e, op, in, NULL);
}

int coll_src_copy(const struct coll_src *src, uint64_t off, void *dst, size_t bytes)
{
    if (bytes == 0)
        return 0;
    if (src->read)
        return src->read(src, off, dst, bytes);
    memcpy(dst, (const uint8_t *)src->local + off, bytes);
    return 0;
}

/* A reduction reads a remote piece through this many bytes of the calling
 * thread's memory at a time: small enough to stay in its core's cache
 * between the read and the reduction. */
#define COLL_BOUNCE_BYTES (64u << 10)

static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;
static int bounce_key_ok;

static void bounce_key_init(void)
{
    bounce_key_ok = pthread_key_create(&bounce_key, free) == 0;
}

/* The calling thread's buffer (an agent worker's; freed when it exits). */
static uint8_t *bounce_get(void)
{
    uint8_t *b;

    pthread_once(&bounce_once, bounce_key_init);
    if (!bounce_key_ok)
        return NULL;
    b = pthread_getspecific(bounce_key);
    if (!b) {
        b = aligned_alloc(64, COLL_BOUNCE_BYTES);
        if (b && pthread_setspecific(bounce_key, b) != 0) {
            free(b);
            b = NULL;
        }
    }
    return b;
}

/* The data operation of one receive whose input is `src`: a copy reads
 * straight into place; a reduction reads a bounce buffer's worth at a
 * time and reduces it while it is in cache. */
static void apply_src(struct coll_exec *e, const struct coll_op *op, const struct coll_src *src)
{
    uint64_t per;
    uint8_t *b;
    int rc;

    if (!src->read) {
        apply(e, op, src->local);
        return;
    }
    if (src->device && e->apply_hook) {
        apply_in(e, op, src->local, src);
        return;
    }
    if (src->device) {
        coll_exec_fail(e, -XTQ_EINVAL); /* device memory without a hook to take it */
        return;
    }
    if (op->cnt == 0)
        return;
    if (op->type == COLL_OP_RECV_COPY && !e->apply_hook) {
        rc = src->read(src, 0, at(e, op->buf, op->off), op->cnt * e->esize);
        if (rc)
            coll_exec_fail(e, rc);
        return;
    }
    b = bounce_get();
    per = (e->chunk_bytes && e->chunk_bytes < COLL_BOUNCE_BYTES ? e->chunk_bytes
                                                                : COLL_BOUNCE_BYTES) /
          e->esize;
    if (!b || per == 0) {
        coll_exec_fail(e, -XTQ_ENOMEM);
        return;
    }
    for (uint64_t done = 0; done < op->cnt; done += per) {
        struct coll_op sub = *op;
        sub.cnt = op->cnt - done < per ? op->cnt - done : per;
        sub.off = op->off + done;
        sub.aoff = op->aoff + done;
        rc = src->read(src, done * e->esize, b, sub.cnt * e->esize);
        if (rc) {
            coll_exec_fail(e, rc);
            return;
        }
        apply(e, &sub, b);
    }
}

/* Run receive ri, then whatever its completion makes runnable. */
static void run(struct coll_exec *e, uint32_t ri, const struct coll_src *first)
{
    const struct coll_sched *s = e->s;
    uint32_t stack[64], n = 0;
    struct coll_src kept = {0};
    const struct coll_src *src = first;

    for (;;) {
        const struct coll_op *op = &s->ops[s->recv_op[ri]];

        apply_src(e, op, src);
        atomic_fetch_or_explicit(&e->rstate[ri], COLL_RS_DONE, memory_order_release);
        /* Receives first, sends after: a send released here can be
         * answered (the peer's reply to it) on another thread before this
         * loop ends, and that reply must find its receive's predecessors
         * already counted down, or it is stashed as early, beyond the
         * schedule's stash bound (which counts no copying receive). */
        for (uint32_t k = s->succ_first[ri]; k < s->succ_first[ri + 1]; k++) {
            const struct coll_op *succ = &s->ops[s->succ[k]];
            if (!coll_op_is_recv(succ->type))
                continue;
            uint32_t old =
                atomic_fetch_sub_explicit(&e->rstate[succ->index], 1, memory_order_acq_rel);
            if ((old & COLL_RS_PREDS) == 1 && (old & COLL_RS_ARRIVED)) {
                if (n < 64) {
                    stack[n++] = succ->index;
                } else {
                    struct coll_src st = {.local = e->rstash[succ->index]};
                    run(e, succ->index, &st);
                }
            }
        }
        for (uint32_t k = s->succ_first[ri]; k < s->succ_first[ri + 1]; k++) {
            const struct coll_op *succ = &s->ops[s->succ[k]];
            if (!coll_op_is_recv(succ->type))
                e->ops->dep_done(e, succ->index);
        }
        e->ops->recv_done(e, ri);
        if (n == 0)
            return;
        ri = stack[--n];
        kept.local = e->rstash[ri];
        src = &kept;
    }
}

static int arrive(struct coll_exec *e, uint32_t ri, const struct coll_src *src, int stashed)
{
    const struct coll_op *op = &e->s->ops[e->s->recv_op[ri]];
    uint32_t st = atomic_load_explicit(&e->rstate[ri], memory_order_acquire);
    const void *data = src->local;
    uint32_t old;

    if (st & (COLL_RS_ARRIVED | COLL_RS_DONE))
        return -XTQ_EPROTO;
    if ((st & COLL_RS_PREDS) == 0) {
        /* Its inputs are done and only this message was missing: nobody
         * else runs it (a completion runs only an ARRIVED receive). */
        atomic_fetch_or_explicit(&e->rstate[ri], COLL_RS_ARRIVED, memory_order_relaxed);
        run(e, ri, src);
        return 0;
    }
    if (!stashed && op->cnt > 0) {
        void *copy = coll_exec_stash_alloc(e, op->cnt * e->esize);
        if (!copy)
            return -XTQ_ENOSPC;
        int rc = coll_src_copy(src, 0, copy, op->cnt * e->esize);
        if (rc) {
            coll_exec_fail(e, rc);
            return rc;
        }
        data = copy;
    }
    e->rstash[ri] = data;
    old = atomic_fetch_or_explicit(&e->rstate[ri], COLL_RS_ARRIVED, memory_order_acq_rel);
    if ((old & COLL_RS_PREDS) == 0) {
        /* its last input completed meanwhile */
        struct coll_src kept = {.local = data};
        run(e, ri, &kept);
    }
    return 0;
}

int coll_exec_arrive(struct coll_exec *e, uint32_t ri, const void *data, int stashed)
{
    struct coll_src src = {.local = data};
    return arrive(e, ri, &src, stashed);
}

int coll_exec_arrive_src(struct coll_exec *e, uint32_t ri, const struct coll_src *src)
{
    return arrive(e, ri, src, 0);
}
