/*
 * The target side: the CPU task every accelerated window registers, and
 * the code it runs. The target process's application thread is never
 * involved: the engine checked the offset against the window's size and
 * rewrote it into a pointer; this runs on a CPU-agent worker.
 *
 * Atomicity: MPI wants accumulates with the same operation and basic type
 * atomic per element, from any number of origins. Tasks run concurrently
 * on the agent's workers, so each data task takes the stripes of a
 * striped mutex that cover its bytes (in increasing order: no deadlock).
 * A mutex taken uncontended costs ~20 ns against the ~10+ us a command
 * takes to arrive, so no lock-free special cases (which would have to be
 * lock-free for every operation on that element to stay atomic).
 */
#include "xmpi.h"

#include <stdalign.h>

void xtq__mpi_target_init(struct xtq__mpi_target *t, void *base, uint64_t size)
{
    t->base = base;
    t->size = size;
    for (unsigned i = 0; i < XTQ__MPI_STRIPES; i++)
        pthread_mutex_init(&t->stripe[i], NULL);
    pthread_mutex_init(&t->sync, NULL);
    t->exclusive = -1;
    t->shared = 0;
    t->refused = 0;
}

void xtq__mpi_target_fini(struct xtq__mpi_target *t)
{
    for (unsigned i = 0; i < XTQ__MPI_STRIPES; i++)
        pthread_mutex_destroy(&t->stripe[i]);
    pthread_mutex_destroy(&t->sync);
}

/* Stripes covering window bytes [lo, hi), as a bit mask. */
static uint64_t stripe_mask(uint64_t lo, uint64_t hi)
{
    uint64_t first = lo >> XTQ__MPI_STRIPE_SHIFT, last = (hi - 1) >> XTQ__MPI_STRIPE_SHIFT;
    uint64_t mask = 0;

    if (hi <= lo)
        return 0;
    if (last - first + 1 >= XTQ__MPI_STRIPES)
        return ~(uint64_t)0;
    for (uint64_t s = first; s <= last; s++)
        mask |= (uint64_t)1 << (s % XTQ__MPI_STRIPES);
    return mask;
}

static void stripes_lock(struct xtq__mpi_target *t, uint64_t mask)
{
    for (unsigned i = 0; i < XTQ__MPI_STRIPES; i++)
        if (mask & ((uint64_t)1 << i))
            pthread_mutex_lock(&t->stripe[i]);
}

static void stripes_unlock(struct xtq__mpi_target *t, uint64_t mask)
{
    for (unsigned i = XTQ__MPI_STRIPES; i-- > 0;)
        if (mask & ((uint64_t)1 << i))
            pthread_mutex_unlock(&t->stripe[i]);
}

/* Alignment the reduction loops need for a type: the largest power of two
 * dividing its size, at most 16 (stricter than C's for a few types; a
 * misaligned operand then only takes the copying path). */
static size_t dt_align(size_t elsize)
{
    size_t a = elsize & (~elsize + 1);
    return a > 16 ? 16 : a;
}

/* inout[i] = inout[i] op in[i], whatever the alignment of either side
 * (the payload lands where the transport put it; MPI allows unaligned
 * window displacements). */
static int reduce_any(enum xtq_op op, enum xtq_datatype dt, size_t es, uint8_t *inout,
                      const uint8_t *in, uint64_t count)
{
    size_t al = dt_align(es);
    alignas(16) uint8_t a[4096], b[4096];
    size_t per = sizeof(a) / es;

    if (op == XTQ_OP_NO_OP)
        return 0;
    if (((uintptr_t)inout % al) == 0 && ((uintptr_t)in % al) == 0)
        return xtq_reduce_local(op, dt, inout, in, count);
    for (uint64_t done = 0; done < count;) {
        size_t n = count - done < per ? (size_t)(count - done) : per;
        int rc;
        memcpy(a, inout + done * es, n * es);
        memcpy(b, in + done * es, n * es);
        rc = xtq_reduce_local(op, dt, a, b, n);
        if (rc)
            return rc;
        memcpy(inout + done * es, a, n * es);
        done += n;
    }
    return 0;
}

/* Take `type` for `origin` if it can be had now (under t->sync). */
static bool lock_try(struct xtq__mpi_target *t, unsigned type, uint32_t origin)
{
    if (type == XTQ__MPI_LOCK_SHARED && t->exclusive < 0) {
        t->shared++;
        return true;
    }
    if (type == XTQ__MPI_LOCK_EXCLUSIVE && t->exclusive < 0 && t->shared == 0) {
        t->exclusive = origin;
        return true;
    }
    return false;
}

/* Give back `type` held by `origin` (under t->sync); -XTQ_EINVAL when it
 * does not hold it. */
static int lock_drop(struct xtq__mpi_target *t, unsigned type, uint32_t origin)
{
    if (type == XTQ__MPI_LOCK_SHARED && t->shared > 0) {
        t->shared--;
        return 0;
    }
    if (type == XTQ__MPI_LOCK_EXCLUSIVE && t->exclusive == (int64_t)origin) {
        t->exclusive = -1;
        return 0;
    }
    return -XTQ_EINVAL;
}

bool xtq__mpi_lock_local_try(struct xtq__mpi_target *t, unsigned type, uint32_t origin)
{
    bool ok;

    pthread_mutex_lock(&t->sync);
    ok = lock_try(t, type, origin);
    pthread_mutex_unlock(&t->sync);
    return ok;
}

int xtq__mpi_lock_local_drop(struct xtq__mpi_target *t, unsigned type, uint32_t origin)
{
    int rc;

    pthread_mutex_lock(&t->sync);
    rc = lock_drop(t, type, origin);
    pthread_mutex_unlock(&t->sync);
    return rc;
}

static int run_lock(struct xtq__mpi_target *t, const struct xtq__mpi_args *a, void *result,
                    size_t result_len)
{
    uint64_t granted = 0;
    int rc = 0;

    if (a->kind == XTQ__MPI_LOCK && (!result || result_len < sizeof(granted)))
        return -XTQ_EINVAL;
    if (a->op != XTQ__MPI_LOCK_SHARED && a->op != XTQ__MPI_LOCK_EXCLUSIVE)
        return -XTQ_EINVAL;
    pthread_mutex_lock(&t->sync);
    if (a->kind == XTQ__MPI_LOCK)
        granted = lock_try(t, a->op, a->origin);
    else
        rc = lock_drop(t, a->op, a->origin);
    pthread_mutex_unlock(&t->sync);
    if (rc == 0 && a->kind == XTQ__MPI_LOCK)
        memcpy(result, &granted, sizeof(granted));
    return rc;
}

/* A data command's ACQUIRE, before anything is applied: 0, or -XTQ_EBUSY
 * (refused: the origin takes the lock with lock commands and resends). */
static int flags_acquire(struct xtq__mpi_target *t, const struct xtq__mpi_args *a)
{
    unsigned type = XTQ__MPI_F_ACQUIRE_TYPE(a->flags);
    bool ok;

    if (!type)
        return 0;
    pthread_mutex_lock(&t->sync);
    ok = lock_try(t, type, a->origin);
    t->refused += !ok;
    pthread_mutex_unlock(&t->sync);
    return ok ? 0 : -XTQ_EBUSY;
}

/* After applying: RELEASE when it succeeded; when it failed, the ACQUIRE
 * is undone (a failed command changes no lock state). */
static int flags_finish(struct xtq__mpi_target *t, const struct xtq__mpi_args *a, int rc)
{
    unsigned type = rc ? XTQ__MPI_F_ACQUIRE_TYPE(a->flags) : XTQ__MPI_F_RELEASE_TYPE(a->flags);
    int drc;

    if (!type)
        return rc;
    pthread_mutex_lock(&t->sync);
    drc = lock_drop(t, type, a->origin);
    pthread_mutex_unlock(&t->sync);
    return rc ? rc : drc;
}

int xtq__mpi_task_run(struct xtq__mpi_target *t, const struct xtq__mpi_args *a, size_t payload_len,
                      void *result, size_t result_len)
{
    const struct xtq__mpi_block *blk;
    struct xtq__mpi_block whole;
    const uint8_t *operand, *payload = (const uint8_t *)(uintptr_t)a->payload;
    uint8_t *target = (uint8_t *)(uintptr_t)a->target;
    uint64_t nblocks, need, lo = UINT64_MAX, hi = 0, total = 0, mask = 0;
    enum xtq_datatype dt = (enum xtq_datatype)a->dtype;
    enum xtq_op op = (enum xtq_op)a->op;
    size_t es;
    int rc = 0;

    if (a->magic != XTQ__MPI_MAGIC)
        return -XTQ_EVERSION;
    if (a->kind == XTQ__MPI_LOCK || a->kind == XTQ__MPI_UNLOCK)
        return a->flags ? -XTQ_EINVAL : run_lock(t, a, result, result_len);
    if ((a->flags & ~0xfu) || XTQ__MPI_F_ACQUIRE_TYPE(a->flags) == 3 ||
        XTQ__MPI_F_RELEASE_TYPE(a->flags) == 3)
        return -XTQ_EINVAL;
    if (a->kind < XTQ__MPI_ACC || a->kind > XTQ__MPI_GET)
        return -XTQ_EINVAL;
    es = xtq_datatype_size(dt);
    if (es == 0 || a->count == 0 || a->count > UINT64_MAX / 64 / es)
        return -XTQ_EINVAL;
    if ((a->kind == XTQ__MPI_ACC || a->kind == XTQ__MPI_GET_ACC) && !xtq_reduce_supported(op, dt))
        return -XTQ_EINVAL;
    /* The engine checked offset + extent against the window; check that
     * the pointer it gave is inside the window too (defence in depth). */
    if (target < t->base || a->extent > t->size ||
        (uint64_t)(target - t->base) > t->size - a->extent)
        return -XTQ_ERANGE;

    /* What the payload must hold, from the arguments alone. */
    nblocks = a->nblocks;
    need = nblocks * sizeof(*blk);
    /* MPI_NO_OP reads the target (an atomic read): no operand travels. */
    if (a->kind != XTQ__MPI_GET &&
        !(op == XTQ_OP_NO_OP && (a->kind == XTQ__MPI_ACC || a->kind == XTQ__MPI_GET_ACC)))
        need += a->count * es * (a->kind == XTQ__MPI_CAS ? 2 : 1);
    if (need > payload_len || (need && !payload))
        return -XTQ_EMSGSIZE;
    if ((a->kind == XTQ__MPI_GET_ACC || a->kind == XTQ__MPI_CAS || a->kind == XTQ__MPI_GET) &&
        (!result || result_len < a->count * es))
        return -XTQ_EINVAL;
    if (a->kind == XTQ__MPI_CAS && (a->count != 1 || nblocks != 0))
        return -XTQ_EINVAL;

    /* Every block inside the checked extent, and they add up to count. */
    if (nblocks == 0) {
        whole.offset = 0;
        whole.count = a->count;
        blk = &whole;
        nblocks = 1;
    } else {
        blk = (const struct xtq__mpi_block *)payload;
    }
    for (uint64_t i = 0; i < nblocks; i++) {
        struct xtq__mpi_block b;
        memcpy(&b, &blk[i], sizeof(b)); /* the payload may be unaligned */
        if (b.count > a->count || b.offset > a->extent || b.count * es > a->extent - b.offset)
            return -XTQ_ERANGE;
        total += b.count;
        if (b.count) {
            lo = b.offset < lo ? b.offset : lo;
            hi = b.offset + b.count * es > hi ? b.offset + b.count * es : hi;
        }
    }
    if (total != a->count)
        return -XTQ_EINVAL;
    operand = payload + a->nblocks * sizeof(*blk);

    /* Everything checked: only now may the lock be taken (a command that
     * fails changes no lock state, so the origin knows where it stands). */
    rc = flags_acquire(t, a);
    if (rc)
        return rc;

    /* MPI_Put / MPI_Get promise no atomicity: no lock. */
    if (a->kind != XTQ__MPI_PUT && a->kind != XTQ__MPI_GET) {
        uint64_t off = (uint64_t)(target - t->base);
        mask = stripe_mask(off + lo, off + hi);
        stripes_lock(t, mask);
    }
    for (uint64_t i = 0, done = 0; i < nblocks && rc == 0; i++) {
        struct xtq__mpi_block b;
        memcpy(&b, &blk[i], sizeof(b));
        uint8_t *dst = target + b.offset;
        size_t bytes = (size_t)(b.count * es);
        switch (a->kind) {
        case XTQ__MPI_ACC:
            rc = reduce_any(op, dt, es, dst, operand + done * es, b.count);
            break;
        case XTQ__MPI_GET_ACC:
            memcpy((uint8_t *)result + done * es, dst, bytes);
            rc = reduce_any(op, dt, es, dst, operand + done * es, b.count);
            break;
        case XTQ__MPI_CAS:
            memcpy(result, dst, es);
            if (memcmp(dst, operand + es, es) == 0)
                memcpy(dst, operand, es);
            break;
        case XTQ__MPI_PUT:
            memcpy(dst, operand + done * es, bytes);
            break;
        case XTQ__MPI_GET:
            memcpy((uint8_t *)result + done * es, dst, bytes);
            break;
        default:
            rc = -XTQ_EINVAL;
            break;
        }
        done += b.count;
    }
    if (mask)
        stripes_unlock(t, mask);
    return flags_finish(t, a, rc);
}

/* The registered CPU kernel: one work-item, the arguments above. */
void xtq__mpi_cpu_task(const xtq_dispatch_t *d, void *kernarg)
{
    struct xtq__mpi_args a;
    size_t result_len = 0;
    void *result;
    int rc;

    memcpy(&a, kernarg, sizeof(a));
    result = xtq_task_result(&result_len);
    /* The task cannot learn the payload's length from the engine (see
     * docs/mpi.md, limits): trust the arguments' own consistency. */
    rc = xtq__mpi_task_run(d->user_data, &a, SIZE_MAX, result, result_len);
    if (rc)
        xtq_task_fail(rc);
}

/* The sync task (kernel index 0, no buffer): a window's lock, found by
 * the window's kernel index (in `count`). */
void xtq__mpi_sync_task(const xtq_dispatch_t *d, void *kernarg)
{
    struct xtq__mpi_args a;
    struct xtq__mpi_target *t = NULL;
    size_t result_len = 0;
    void *result;
    int rc;

    memcpy(&a, kernarg, sizeof(a));
    result = xtq_task_result(&result_len);
    if (a.count < xtq__mpi.table_size && xtq__mpi.target_by_index)
        t = atomic_load_explicit(&xtq__mpi.target_by_index[a.count], memory_order_acquire);
    if (!t || (a.kind != XTQ__MPI_LOCK && a.kind != XTQ__MPI_UNLOCK)) {
        xtq_task_fail(t ? -XTQ_EINVAL : -XTQ_ENOKERNEL);
        return;
    }
    rc = xtq__mpi_task_run(t, &a, 0, result, result_len);
    if (rc)
        xtq_task_fail(rc);
}
