/*
 * Schedule generator (coll_sched.h). Algorithms, as MPICH has them:
 *  - recursive doubling: log2(p) exchanges of the whole vector, every rank
 *    computing the full result; each step writes a fresh scratch vector
 *    (a received step may not overwrite what this rank's own send of the
 *    same step still reads), and the two partners combine the operands in
 *    the same order (lower rank first), so every rank's result is the
 *    same bits.
 *  - Rabenseifner: reduce-scatter by recursive halving, then an allgather
 *    by recursive doubling (a reduce gathers the blocks to the root).
 *  - ring: reduce-scatter and allgather around the ring, n - 1 steps each,
 *    every block split into pieces so that transfer and reduction overlap.
 * Non-powers of two are folded in MPICH's way: among the first 2 * rem
 * ranks, even ranks hand their vector to the next rank and take the
 * result back at the end.
 *
 * Dependencies are not written by hand: the algorithm emits steps in
 * program order and build_deps() gives each receive the earlier receives
 * that wrote what it reads or overwrites, and each send the receives that
 * wrote what it sends.
 */
#include "coll_sched.h"

#include <stdlib.h>
#include <string.h>

#include <xtq/error.h>

int coll_log2(int n)
{
    int l = 0;
    while ((1 << (l + 1)) <= n)
        l++;
    return l;
}

int coll_pof2(int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

const char *xtq_coll_alg_name(enum xtq_coll_alg alg)
{
    static const char *const names[] = {"auto", "rd", "rabenseifner", "ring"};
    return (unsigned)alg < XTQ_COLL_ALG_COUNT ? names[alg] : "?";
}

const char *coll_phase_name(unsigned phase)
{
    static const char *const names[] = {"credit",    "fold",   "exchange", "reduce-scatter",
                                        "allgather", "gather", "unfold",   "release"};
    return phase < sizeof(names) / sizeof(names[0]) ? names[phase] : "?";
}

enum xtq_coll_alg coll_choose_alg(enum xtq_coll_kind kind, int nranks, uint64_t count,
                                  uint32_t elem_size, const struct coll_thresholds *th)
{
    uint64_t bytes = count * elem_size;

    (void)kind;
    /* MPICH: short vectors, or fewer elements than the power of two below
     * the rank count (Rabenseifner's blocks would be empty). */
    if (bytes <= th->rd_max || count < (uint64_t)coll_pof2(nranks))
        return XTQ_COLL_ALG_RD;
    if (bytes < th->ring_min)
        return XTQ_COLL_ALG_RABENSEIFNER;
    return XTQ_COLL_ALG_RING;
}

/* ---- emitting ops --------------------------------------------------------- */

struct gen {
    struct coll_sched *s;
    uint32_t *nsend_to; /* per peer: sends so far (the seq of the next) */
    uint32_t *nrecv_from;
    int err;
};

static struct coll_op *emit(struct gen *g, unsigned type, int peer, unsigned buf, uint64_t off,
                            uint64_t cnt, unsigned phase, unsigned step)
{
    struct coll_sched *s = g->s;
    struct coll_op *op;

    if (g->err)
        return NULL;
    if (s->nops == s->op_cap) {
        uint64_t cap = s->op_cap ? s->op_cap * 2 : 64;
        struct coll_op *n = realloc(s->ops, cap * sizeof(*n));
        if (!n) {
            g->err = -XTQ_ENOMEM;
            return NULL;
        }
        s->ops = n;
        s->op_cap = cap;
    }
    op = &s->ops[s->nops++];
    memset(op, 0, sizeof(*op));
    op->type = (uint8_t)type;
    op->peer = peer;
    op->buf = (uint8_t)buf;
    op->off = off;
    op->cnt = cnt;
    op->phase = (uint8_t)phase;
    op->step = (uint16_t)step;
    if (coll_op_is_recv(type)) {
        op->seq = g->nrecv_from[peer]++;
        op->index = s->nrecvs++;
    } else {
        op->seq = g->nsend_to[peer]++;
        op->index = s->nsends++;
    }
    return op;
}

/* A transfer of [off, off + cnt) split into pieces of at most piece_elems;
 * an empty one still travels (one zero-length message: the receiver
 * counts it, and it carries the call's signature). */
static void send_range(struct gen *g, int peer, unsigned buf, uint64_t off, uint64_t cnt,
                       unsigned phase, unsigned step)
{
    uint64_t piece = g->s->p.piece_elems;
    uint64_t done = 0;
    do {
        uint64_t n = cnt - done < piece ? cnt - done : piece;
        emit(g, COLL_OP_SEND, peer, buf, off + done, n, phase, step);
        done += n;
    } while (done < cnt);
}

static void recv_range(struct gen *g, unsigned type, int peer, unsigned buf, uint64_t off,
                       uint64_t cnt, unsigned phase, unsigned step)
{
    uint64_t piece = g->s->p.piece_elems;
    uint64_t done = 0;
    do {
        uint64_t n = cnt - done < piece ? cnt - done : piece;
        emit(g, type, peer, buf, off + done, n, phase, step);
        done += n;
    } while (done < cnt);
}

/* RECV_REDUCE_TO: dst[doff..] = lower op higher of a[aoff..] and the input. */
static void recv_reduce_to(struct gen *g, int peer, unsigned dst, uint64_t doff, unsigned a,
                           uint64_t aoff, uint64_t cnt, unsigned phase, unsigned step)
{
    uint64_t piece = g->s->p.piece_elems;
    uint64_t done = 0;
    do {
        uint64_t n = cnt - done < piece ? cnt - done : piece;
        struct coll_op *op =
            emit(g, COLL_OP_RECV_REDUCE_TO, peer, dst, doff + done, n, phase, step);
        if (op) {
            op->abuf = (uint8_t)a;
            op->aoff = aoff + done;
            op->in_first = peer < g->s->p.rank;
        }
        done += n;
    } while (done < cnt);
}

/* Reduce what arrives into WORK[off..]: with WORK's own values (RMW), or,
 * where WORK has not been written yet, with buffer `a`'s same range
 * (RECV_REDUCE_TO; out of place, `a` is SEND). */
static void recv_reduce_work(struct gen *g, int peer, unsigned a, uint64_t off, uint64_t cnt,
                             unsigned phase, unsigned step)
{
    if (a == COLL_BUF_WORK)
        recv_range(g, COLL_OP_RECV_REDUCE, peer, COLL_BUF_WORK, off, cnt, phase, step);
    else
        recv_reduce_to(g, peer, COLL_BUF_WORK, off, a, off, cnt, phase, step);
}

static void prologue_copy(struct coll_sched *s, unsigned src, unsigned dst, uint64_t dst_off)
{
    struct coll_copy *c = &s->prologue[s->nprologue++];
    c->src = (uint8_t)src;
    c->dst = (uint8_t)dst;
    c->src_off = 0;
    c->dst_off = dst_off;
    c->cnt = s->p.count;
}

/* Team rank of the participant with folded rank `newrank`. */
static int unfold_rank(int newrank, int rem)
{
    return newrank < rem ? newrank * 2 + 1 : newrank + rem;
}

/* ---- algorithms ----------------------------------------------------------- */

static void gen_rd(struct gen *g)
{
    struct coll_sched *s = g->s;
    const struct coll_params *p = &s->p;
    int n = p->nranks, r = p->rank, pof2 = coll_pof2(n), rem = n - pof2, newrank;
    uint64_t count = p->count, next = 0;
    unsigned cur;
    uint64_t cur_off = 0;

    /* V0, the input, must stay as it is until this rank's first send has
     * been read: the caller's send buffer, or a scratch copy in place. */
    if (p->inplace) {
        prologue_copy(s, COLL_BUF_WORK, COLL_BUF_SCRATCH, 0);
        cur = COLL_BUF_SCRATCH;
        next = count;
    } else {
        cur = COLL_BUF_SEND;
    }
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            send_range(g, r + 1, cur, cur_off, count, COLL_PHASE_FOLD, 0);
            newrank = -1;
        } else {
            recv_reduce_to(g, r - 1, COLL_BUF_SCRATCH, next, cur, cur_off, count, COLL_PHASE_FOLD,
                           0);
            cur = COLL_BUF_SCRATCH;
            cur_off = next;
            next += count;
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }
    if (newrank != -1) {
        unsigned step = 1;
        for (int mask = 1; mask < pof2; mask <<= 1, step++) {
            int dst = unfold_rank(newrank ^ mask, rem);
            int last = mask * 2 >= pof2;
            unsigned tbuf = last ? COLL_BUF_WORK : COLL_BUF_SCRATCH;
            uint64_t toff = last ? 0 : next;

            send_range(g, dst, cur, cur_off, count, COLL_PHASE_EXCHANGE, step);
            recv_reduce_to(g, dst, tbuf, toff, cur, cur_off, count, COLL_PHASE_EXCHANGE, step);
            cur = tbuf;
            cur_off = toff;
            if (!last)
                next += count;
        }
        if (r < 2 * rem) /* odd: hand the result back */
            send_range(g, r - 1, COLL_BUF_WORK, 0, count, COLL_PHASE_UNFOLD, step);
    } else {
        recv_range(g, COLL_OP_RECV_COPY, r + 1, COLL_BUF_WORK, 0, count, COLL_PHASE_UNFOLD,
                   (unsigned)(coll_log2(pof2) + 1));
    }
    s->scratch_elems = next;
}

/* Block b of nb over count elements: MPICH's split (the first count % nb
 * blocks one longer). */
static uint64_t block_off(uint64_t count, int nb, int b)
{
    uint64_t q = count / (uint64_t)nb, m = count % (uint64_t)nb;
    return (uint64_t)b * q + ((uint64_t)b < m ? (uint64_t)b : m);
}

static void range_of(uint64_t count, int nb, int lo, int hi, uint64_t *off, uint64_t *cnt)
{
    *off = block_off(count, nb, lo);
    *cnt = block_off(count, nb, hi) - *off;
}

/* Rabenseifner. At a reduce, the blocks go to the root instead of to all. */
static void gen_rabenseifner(struct gen *g)
{
    struct coll_sched *s = g->s;
    const struct coll_params *p = &s->p;
    int n = p->nranks, r = p->rank, pof2 = coll_pof2(n), rem = n - pof2, newrank;
    uint64_t count = p->count;
    int reduce = p->kind == XTQ_COLL_REDUCE;
    struct {
        int keep_lo, keep_hi, give_lo, give_hi, dst;
    } st[32];
    int nst = 0, lo = 0, hi = pof2;
    unsigned step = 1;
    /* Out of place, WORK holds nothing until a range's first reduction
     * writes it from SEND and the input (RECV_REDUCE_TO): sends before
     * that read SEND, and no prologue copies the whole vector (a pass over
     * it before the first message, 1.6 ms of a 10 ms call at 16 MiB on 4
     * ranks). The fold's reduction writes all of WORK; without it, step 1
     * writes the half kept, and every later step stays inside that half.
     * The half given away is written by the allgather (or never, at a
     * reduce, where only the root's WORK is the result). */
    unsigned src = p->inplace ? COLL_BUF_WORK : COLL_BUF_SEND;

    if (r < 2 * rem) {
        if (r % 2 == 0) {
            send_range(g, r + 1, src, 0, count, COLL_PHASE_FOLD, 0);
            newrank = -1;
        } else {
            recv_reduce_work(g, r - 1, src, 0, count, COLL_PHASE_FOLD, 0);
            src = COLL_BUF_WORK;
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }

    if (newrank != -1) {
        for (int mask = 1; mask < pof2; mask <<= 1, step++) {
            int dst = unfold_rank(newrank ^ mask, rem), mid = (lo + hi) / 2;
            uint64_t off, cnt;

            if ((newrank & mask) == 0) {
                st[nst].keep_lo = lo, st[nst].keep_hi = mid;
                st[nst].give_lo = mid, st[nst].give_hi = hi;
            } else {
                st[nst].keep_lo = mid, st[nst].keep_hi = hi;
                st[nst].give_lo = lo, st[nst].give_hi = mid;
            }
            st[nst].dst = dst;
            range_of(count, pof2, st[nst].give_lo, st[nst].give_hi, &off, &cnt);
            send_range(g, dst, src, off, cnt, COLL_PHASE_RS, step);
            range_of(count, pof2, st[nst].keep_lo, st[nst].keep_hi, &off, &cnt);
            recv_reduce_work(g, dst, src, off, cnt, COLL_PHASE_RS, step);
            src = COLL_BUF_WORK;
            lo = st[nst].keep_lo;
            hi = st[nst].keep_hi;
            nst++;
        }
    }

    if (!reduce) {
        if (newrank != -1) {
            for (int i = nst - 1; i >= 0; i--, step++) {
                uint64_t off, cnt;
                range_of(count, pof2, st[i].keep_lo, st[i].keep_hi, &off, &cnt);
                send_range(g, st[i].dst, COLL_BUF_WORK, off, cnt, COLL_PHASE_AG, step);
                range_of(count, pof2, st[i].give_lo, st[i].give_hi, &off, &cnt);
                recv_range(g, COLL_OP_RECV_COPY, st[i].dst, COLL_BUF_WORK, off, cnt, COLL_PHASE_AG,
                           step);
            }
            if (r < 2 * rem)
                send_range(g, r - 1, COLL_BUF_WORK, 0, count, COLL_PHASE_UNFOLD, step);
        } else {
            recv_range(g, COLL_OP_RECV_COPY, r + 1, COLL_BUF_WORK, 0, count, COLL_PHASE_UNFOLD,
                       (unsigned)(2 * coll_log2(pof2) + 1));
        }
        return;
    }

    /* Reduce: each participant's block straight to the root. A folded
     * rank that is not the root would be done once its vector is sent,
     * before the others have even posted: its partner releases it after
     * the reduce-scatter, so that every rank's completion still needs every
     * rank's post (what lets slots be reused without credits, coll.c). */
    if (r != p->root) {
        if (newrank != -1) {
            uint64_t off, cnt;
            range_of(count, pof2, lo, hi, &off, &cnt);
            send_range(g, p->root, COLL_BUF_WORK, off, cnt, COLL_PHASE_GATHER, step);
            if (r < 2 * rem && r - 1 != p->root) {
                struct coll_op *op =
                    emit(g, COLL_OP_SEND, r - 1, COLL_BUF_WORK, 0, 0, COLL_PHASE_RELEASE, step);
                if (op)
                    op->after_all = 1;
            }
        } else {
            recv_range(g, COLL_OP_RECV_COPY, r + 1, COLL_BUF_WORK, 0, 0, COLL_PHASE_RELEASE, step);
        }
        return;
    }
    if (newrank != -1 && r < 2 * rem && r - 1 != p->root) {
        struct coll_op *op =
            emit(g, COLL_OP_SEND, r - 1, COLL_BUF_WORK, 0, 0, COLL_PHASE_RELEASE, step);
        if (op)
            op->after_all = 1;
    }
    for (int q = 0; q < n; q++) {
        int qnew = q < 2 * rem ? (q % 2 ? q / 2 : -1) : q - rem, qlo = 0, qhi = pof2;
        uint64_t off, cnt;

        if (q == r || qnew == -1)
            continue;
        for (int mask = 1; mask < pof2; mask <<= 1) {
            int mid = (qlo + qhi) / 2;
            if ((qnew & mask) == 0)
                qhi = mid;
            else
                qlo = mid;
        }
        range_of(count, pof2, qlo, qhi, &off, &cnt);
        recv_range(g, COLL_OP_RECV_COPY, q, COLL_BUF_WORK, off, cnt, COLL_PHASE_GATHER, step);
    }
}

static void gen_ring(struct gen *g)
{
    struct coll_sched *s = g->s;
    const struct coll_params *p = &s->p;
    int n = p->nranks, r = p->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    uint64_t count = p->count, off, cnt;
    int reduce = p->kind == XTQ_COLL_REDUCE;

    /* Out of place, nothing is copied first: each reduce-scatter receive
     * reduces a block this rank has not touched yet, so it writes WORK
     * from SEND and the input (RECV_REDUCE_TO), and the first send (the
     * only one of a block not received before) reads SEND. */
    unsigned input = p->inplace ? COLL_BUF_WORK : COLL_BUF_SEND;
    for (int st = 0; st < n - 1; st++) {
        range_of(count, n, (r - st + n) % n, (r - st + n) % n + 1, &off, &cnt);
        send_range(g, right, st == 0 ? input : COLL_BUF_WORK, off, cnt, COLL_PHASE_RS,
                   (unsigned)st + 1);
        range_of(count, n, (r - st - 1 + 2 * n) % n, (r - st - 1 + 2 * n) % n + 1, &off, &cnt);
        recv_reduce_work(g, left, input, off, cnt, COLL_PHASE_RS, (unsigned)st + 1);
    }
    /* Rank r now owns block r + 1. */
    if (reduce) {
        if (r != p->root) {
            range_of(count, n, (r + 1) % n, (r + 1) % n + 1, &off, &cnt);
            send_range(g, p->root, COLL_BUF_WORK, off, cnt, COLL_PHASE_GATHER, (unsigned)n);
        } else {
            for (int q = 0; q < n; q++) {
                if (q == r)
                    continue;
                range_of(count, n, (q + 1) % n, (q + 1) % n + 1, &off, &cnt);
                recv_range(g, COLL_OP_RECV_COPY, q, COLL_BUF_WORK, off, cnt, COLL_PHASE_GATHER,
                           (unsigned)n);
            }
        }
        return;
    }
    for (int st = 0; st < n - 1; st++) {
        range_of(count, n, (r + 1 - st + n) % n, (r + 1 - st + n) % n + 1, &off, &cnt);
        send_range(g, right, COLL_BUF_WORK, off, cnt, COLL_PHASE_AG, (unsigned)(n + st));
        range_of(count, n, (r - st + n) % n, (r - st + n) % n + 1, &off, &cnt);
        recv_range(g, COLL_OP_RECV_COPY, left, COLL_BUF_WORK, off, cnt, COLL_PHASE_AG,
                   (unsigned)(n + st));
    }
}

/* ---- dependencies ------------------------------------------------------------ */

/* The latest receive that wrote each element of a buffer, as disjoint
 * sorted intervals (writer UINT32_MAX: the input, nothing to wait for). */
struct ivl {
    uint64_t lo, hi;
    uint32_t writer;
};
struct ivmap {
    struct ivl *v;
    size_t n, cap;
};

static int ivmap_reserve(struct ivmap *m, size_t extra)
{
    if (m->n + extra <= m->cap)
        return 0;
    size_t cap = m->cap ? m->cap * 2 : 16;
    while (cap < m->n + extra)
        cap *= 2;
    struct ivl *v = realloc(m->v, cap * sizeof(*v));
    if (!v)
        return -XTQ_ENOMEM;
    m->v = v;
    m->cap = cap;
    return 0;
}

/* First interval with hi > lo. */
static size_t ivmap_find(const struct ivmap *m, uint64_t lo)
{
    size_t a = 0, b = m->n;
    while (a < b) {
        size_t c = (a + b) / 2;
        if (m->v[c].hi <= lo)
            a = c + 1;
        else
            b = c;
    }
    return a;
}

/* Record `writer` for [lo, hi): cut the overlapped intervals, insert one. */
static int ivmap_write(struct ivmap *m, uint64_t lo, uint64_t hi, uint32_t writer)
{
    size_t i, j;
    struct ivl left = {0, 0, 0}, right = {0, 0, 0};
    int has_left = 0, has_right = 0;

    if (lo >= hi)
        return 0;
    if (ivmap_reserve(m, 2))
        return -XTQ_ENOMEM;
    i = ivmap_find(m, lo);
    j = i;
    while (j < m->n && m->v[j].lo < hi)
        j++;
    if (i < j && m->v[i].lo < lo) {
        left = m->v[i];
        left.hi = lo;
        has_left = 1;
    }
    if (i < j && m->v[j - 1].hi > hi) {
        right = m->v[j - 1];
        right.lo = hi;
        has_right = 1;
    }
    size_t nins = (size_t)has_left + 1 + (size_t)has_right;
    memmove(&m->v[i + nins], &m->v[j], (m->n - j) * sizeof(struct ivl));
    m->n = m->n - (j - i) + nins;
    if (has_left)
        m->v[i++] = left;
    m->v[i].lo = lo;
    m->v[i].hi = hi;
    m->v[i].writer = writer;
    i++;
    if (has_right)
        m->v[i] = right;
    return 0;
}

static int add_dep(struct coll_sched *s, uint32_t dep)
{
    if (s->ndeps == s->dep_cap) {
        uint64_t cap = s->dep_cap ? s->dep_cap * 2 : 64;
        uint32_t *d = realloc(s->deps, cap * sizeof(*d));
        if (!d)
            return -XTQ_ENOMEM;
        s->deps = d;
        s->dep_cap = cap;
    }
    s->deps[s->ndeps++] = dep;
    return 0;
}

/* Writers of [lo, hi) into the op's dependency list (distinct, ascending). */
static int deps_of_range(struct coll_sched *s, struct coll_op *op, const struct ivmap *m,
                         uint64_t lo, uint64_t hi)
{
    if (lo >= hi)
        return 0;
    for (size_t i = ivmap_find(m, lo); i < m->n && m->v[i].lo < hi; i++) {
        uint32_t w = m->v[i].writer, k;
        for (k = 0; k < op->ndeps; k++)
            if (s->deps[op->dep_first + k] == w)
                break;
        if (k < op->ndeps)
            continue;
        if (add_dep(s, w))
            return -XTQ_ENOMEM;
        op->ndeps++;
    }
    return 0;
}

static int build_deps(struct coll_sched *s)
{
    struct ivmap map[COLL_BUF_COUNT];
    uint32_t *credit_from = NULL; /* recv index of the credit from each peer */
    int rc = -XTQ_ENOMEM;

    memset(map, 0, sizeof(map));
    if (s->p.handshake) {
        credit_from = malloc((size_t)s->p.nranks * sizeof(*credit_from));
        if (!credit_from)
            goto out;
        for (int q = 0; q < s->p.nranks; q++)
            credit_from[q] = UINT32_MAX;
    }
    for (uint32_t i = 0, nrecv_before = 0; i < s->nops; i++) {
        struct coll_op *op = &s->ops[i];
        uint64_t lo = op->off, hi = op->off + op->cnt;

        if (i > 0 && coll_op_is_recv(s->ops[i - 1].type))
            nrecv_before++;
        op->dep_first = s->ndeps;
        op->ndeps = 0;
        switch (op->type) {
        case COLL_OP_SEND:
            if (deps_of_range(s, op, &map[op->buf], lo, hi))
                goto out;
            /* An empty piece carries no data to depend on, but the order
             * still matters: every rank's completion must need every
             * rank's post (coll.c reuses slots on that). It follows all
             * the receives before it. */
            if (op->after_all || op->cnt == 0) {
                s->ndeps = op->dep_first;
                op->ndeps = 0;
                for (uint32_t r = 0; r < nrecv_before; r++) {
                    if (add_dep(s, r))
                        goto out;
                    op->ndeps++;
                }
            }
            if (credit_from && credit_from[op->peer] != UINT32_MAX) {
                if (add_dep(s, credit_from[op->peer]))
                    goto out;
                op->ndeps++;
            }
            break;
        case COLL_OP_RECV_CREDIT:
            credit_from[op->peer] = op->index;
            break;
        case COLL_OP_RECV_REDUCE:
        case COLL_OP_RECV_COPY:
            /* Read-modify-write, or overwrite: after the earlier writers. */
            if (deps_of_range(s, op, &map[op->buf], lo, hi) ||
                ivmap_write(&map[op->buf], lo, hi, op->index))
                goto out;
            break;
        case COLL_OP_RECV_REDUCE_TO:
            if (deps_of_range(s, op, &map[op->abuf], op->aoff, op->aoff + op->cnt) ||
                deps_of_range(s, op, &map[op->buf], lo, hi) ||
                ivmap_write(&map[op->buf], lo, hi, op->index))
                goto out;
            break;
        default:
            break;
        }
    }
    rc = 0;
out:
    for (int b = 0; b < COLL_BUF_COUNT; b++)
        free(map[b].v);
    free(credit_from);
    return rc;
}

/* Index tables: recv/send index -> op, successors, receives by peer. */
static int build_tables(struct coll_sched *s)
{
    uint32_t nr = s->nrecvs, n = (uint32_t)s->p.nranks;
    uint32_t *fill = NULL;

    s->recv_op = calloc(nr + 1, sizeof(uint32_t));
    s->send_op = calloc(s->nsends + 1, sizeof(uint32_t));
    s->succ_first = calloc(nr + 2, sizeof(uint32_t));
    s->succ = calloc(s->ndeps + 1, sizeof(uint32_t));
    s->peer_first = calloc(n + 2, sizeof(uint32_t));
    s->by_peer = calloc(nr + 1, sizeof(uint32_t));
    fill = calloc((nr > n ? nr : n) + 2, sizeof(uint32_t));
    if (!s->recv_op || !s->send_op || !s->succ_first || !s->succ || !s->peer_first || !s->by_peer ||
        !fill) {
        free(fill);
        return -XTQ_ENOMEM;
    }
    for (uint32_t i = 0; i < s->nops; i++) {
        const struct coll_op *op = &s->ops[i];
        if (coll_op_is_recv(op->type)) {
            s->recv_op[op->index] = i;
            s->peer_first[op->peer + 1]++;
        } else {
            s->send_op[op->index] = i;
        }
        for (uint32_t k = 0; k < op->ndeps; k++)
            s->succ_first[s->deps[op->dep_first + k] + 1]++;
    }
    for (uint32_t r = 0; r < nr; r++)
        s->succ_first[r + 1] += s->succ_first[r];
    for (uint32_t q = 0; q < n; q++)
        s->peer_first[q + 1] += s->peer_first[q];
    /* Successors in program order (a receive that completes starts them
     * in that order). */
    memset(fill, 0, ((nr > n ? nr : n) + 2) * sizeof(uint32_t));
    for (uint32_t i = 0; i < s->nops; i++) {
        const struct coll_op *op = &s->ops[i];
        for (uint32_t k = 0; k < op->ndeps; k++) {
            uint32_t d = s->deps[op->dep_first + k];
            s->succ[s->succ_first[d] + fill[d]++] = i;
        }
    }
    memset(fill, 0, ((nr > n ? nr : n) + 2) * sizeof(uint32_t));
    for (uint32_t i = 0; i < s->nops; i++) {
        const struct coll_op *op = &s->ops[i];
        if (coll_op_is_recv(op->type))
            s->by_peer[s->peer_first[op->peer] + fill[op->peer]++] = op->index;
    }
    free(fill);
    return 0;
}

int64_t coll_sched_lookup(const struct coll_sched *s, int peer, uint64_t seq)
{
    if (peer < 0 || peer >= s->p.nranks)
        return -1;
    if (seq >= (uint64_t)(s->peer_first[peer + 1] - s->peer_first[peer]))
        return -1;
    return s->by_peer[s->peer_first[peer] + seq];
}

/* Credits: to every peer this rank receives data from, one zero-length
 * message at the post; from every peer it sends to, one to wait for. The
 * peers are those of the schedule without credits, built first. */
static int add_credits(struct gen *g, const struct coll_params *p)
{
    struct coll_params q = *p;
    struct coll_sched plain;
    uint8_t *from, *to;
    int rc;

    q.handshake = 0;
    rc = coll_sched_build(&q, &plain);
    if (rc)
        return rc;
    from = calloc((size_t)p->nranks * 2, 1);
    if (!from) {
        coll_sched_free(&plain);
        return -XTQ_ENOMEM;
    }
    to = from + p->nranks;
    for (uint32_t i = 0; i < plain.nops; i++) {
        const struct coll_op *op = &plain.ops[i];
        if (coll_op_is_recv(op->type))
            from[op->peer] = 1;
        else
            to[op->peer] = 1;
    }
    for (int k = 0; k < p->nranks; k++) {
        if (from[k])
            emit(g, COLL_OP_SEND_CREDIT, k, COLL_BUF_WORK, 0, 0, COLL_PHASE_CREDIT, 0);
        if (to[k])
            emit(g, COLL_OP_RECV_CREDIT, k, COLL_BUF_WORK, 0, 0, COLL_PHASE_CREDIT, 0);
    }
    free(from);
    coll_sched_free(&plain);
    return g->err;
}

void coll_sched_free(struct coll_sched *s)
{
    free(s->ops);
    free(s->recv_op);
    free(s->send_op);
    free(s->deps);
    free(s->succ_first);
    free(s->succ);
    free(s->peer_first);
    free(s->by_peer);
    memset(s, 0, sizeof(*s));
}

int coll_sched_build(const struct coll_params *p, struct coll_sched *s)
{
    struct gen g;
    int rc;

    memset(s, 0, sizeof(*s));
    if (p->nranks < 1 || p->rank < 0 || p->rank >= p->nranks || p->elem_size == 0 ||
        p->piece_elems == 0 ||
        (p->kind == XTQ_COLL_REDUCE && (p->root < 0 || p->root >= p->nranks)) ||
        (p->kind != XTQ_COLL_REDUCE && p->kind != XTQ_COLL_ALLREDUCE))
        return -XTQ_EINVAL;
    s->p = *p;
    memset(&g, 0, sizeof(g));
    g.s = s;
    g.nsend_to = calloc((size_t)p->nranks * 2, sizeof(uint32_t));
    if (!g.nsend_to)
        return -XTQ_ENOMEM;
    g.nrecv_from = g.nsend_to + p->nranks;

    if (p->nranks == 1) {
        s->p.handshake = 0;
        if (!p->inplace)
            prologue_copy(s, COLL_BUF_SEND, COLL_BUF_WORK, 0);
    } else {
        if (p->handshake && (rc = add_credits(&g, p)) != 0)
            goto fail;
        switch (p->alg) {
        case XTQ_COLL_ALG_RD:
            gen_rd(&g);
            break;
        case XTQ_COLL_ALG_RABENSEIFNER:
            gen_rabenseifner(&g);
            break;
        case XTQ_COLL_ALG_RING:
            gen_ring(&g);
            break;
        default:
            rc = -XTQ_EINVAL;
            goto fail;
        }
    }
    if ((rc = g.err) != 0 || (rc = build_deps(s)) != 0 || (rc = build_tables(s)) != 0)
        goto fail;
    for (uint32_t i = 0; i < s->nops; i++) {
        const struct coll_op *op = &s->ops[i];
        if (op->cnt > s->max_msg_elems)
            s->max_msg_elems = op->cnt;
        if (op->type == COLL_OP_RECV_REDUCE || op->type == COLL_OP_RECV_REDUCE_TO) {
            /* As coll_exec_stash_alloc() rounds: 16 bytes. */
            if (!s->p.handshake || op->ndeps > 0)
                s->stash_bound += (op->cnt * p->elem_size + 15) & ~(uint64_t)15;
        }
    }
    free(g.nsend_to);
    return 0;
fail:
    free(g.nsend_to);
    coll_sched_free(s);
    return rc;
}
