/*
 * An out-of-band allgather for tests (xtq_oob_coll_t), with no launcher and
 * no MPI: ranks are threads of one process or processes forked from one
 * parent, meeting in one `struct oob_shm` (malloc'ed, or mmap'ed shared
 * before the fork). Nonblocking, as xtq_init() wants it: allgather copies
 * this rank's block in and counts its arrival, req_test copies everything
 * out once every rank has arrived.
 *
 * Rounds alternate between two block sets. Round k of rank r uses set
 * k % 2 and is complete when that set has seen size * (k / 2 + 1)
 * arrivals; a rank can reach round k + 2 only after every rank started
 * k + 1, hence finished reading round k, so two sets are enough. One
 * allgather per rank is in flight at a time (libxtq's use).
 *
 * Faults for error-path tests: fail_start_round / fail_test_round make
 * round k's allgather or its req_test fail with -XTQ_EIO (-1: never).
 */
#ifndef XTQ_OOB_SHM_H
#define XTQ_OOB_SHM_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xtq/xtq.h>

#define OOB_SHM_MAX_RANKS 8
#define OOB_SHM_BLOCK     4096

struct oob_shm {
    int size;
    _Atomic uint64_t arrived[2];
    /* Requests started and not yet freed, by rank: a rank that finished
     * checks its own (another may still hold one in its finalize). */
    _Atomic uint64_t reqs_live[OOB_SHM_MAX_RANKS];
    int64_t fail_start_round;
    int64_t fail_test_round;
    unsigned char block[2][OOB_SHM_MAX_RANKS][OOB_SHM_BLOCK];
};

/* Requests still live on all ranks (read once every rank is done). */
static inline uint64_t oob_shm_reqs_live(struct oob_shm *shm)
{
    uint64_t n = 0;
    for (int i = 0; i < OOB_SHM_MAX_RANKS; i++)
        n += atomic_load(&shm->reqs_live[i]);
    return n;
}

/* coll_info: one per rank (per thread, or per forked process). */
struct oob_shm_rank {
    struct oob_shm *shm;
    int rank;
    uint64_t round;
};

struct oob_shm_req {
    struct oob_shm_rank *me;
    uint64_t round;
    void *rbuf;
    size_t len;
};

static inline void oob_shm_init(struct oob_shm *shm, int size)
{
    memset(shm, 0, sizeof(*shm));
    shm->size = size;
    shm->fail_start_round = -1;
    shm->fail_test_round = -1;
}

static inline int oob_shm_allgather(const void *sbuf, void *rbuf, size_t len, void *coll_info,
                                    void **req)
{
    struct oob_shm_rank *me = coll_info;
    struct oob_shm *shm = me->shm;
    uint64_t k = me->round++;
    struct oob_shm_req *r;

    if (len > OOB_SHM_BLOCK || (int64_t)k == shm->fail_start_round)
        return -XTQ_EIO;
    r = malloc(sizeof(*r));
    if (!r)
        return -XTQ_ENOMEM;
    *r = (struct oob_shm_req){me, k, rbuf, len};
    memcpy(shm->block[k % 2][me->rank], sbuf, len);
    atomic_fetch_add_explicit(&shm->reqs_live[me->rank], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&shm->arrived[k % 2], 1, memory_order_release);
    *req = r;
    return 0;
}

static inline int oob_shm_req_test(void *req)
{
    struct oob_shm_req *r = req;
    struct oob_shm *shm = r->me->shm;
    uint64_t need = (uint64_t)shm->size * (r->round / 2 + 1);

    if ((int64_t)r->round == shm->fail_test_round)
        return -XTQ_EIO;
    if (atomic_load_explicit(&shm->arrived[r->round % 2], memory_order_acquire) < need)
        return -XTQ_EAGAIN;
    for (int i = 0; i < shm->size; i++)
        memcpy((unsigned char *)r->rbuf + (size_t)i * r->len, shm->block[r->round % 2][i], r->len);
    return 0;
}

static inline int oob_shm_req_free(void *req)
{
    struct oob_shm_req *r = req;
    atomic_fetch_sub_explicit(&r->me->shm->reqs_live[r->me->rank], 1, memory_order_relaxed);
    free(r);
    return 0;
}

/* The xtq_oob_coll_t for rank `me->rank` of `me->shm->size`. */
static inline xtq_oob_coll_t oob_shm_coll(struct oob_shm_rank *me)
{
    xtq_oob_coll_t c = {
        .allgather = oob_shm_allgather,
        .req_test = oob_shm_req_test,
        .req_free = oob_shm_req_free,
        .coll_info = me,
        .rank = me->rank,
        .size = me->shm->size,
    };
    return c;
}

#endif /* XTQ_OOB_SHM_H */
