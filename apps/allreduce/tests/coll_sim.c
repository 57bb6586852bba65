/* All ranks of a team in one process (coll_sim.h). */
#include "coll_sim.h"

#include <complex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xtq/xtq.h>

/* Layouts of the pair types (as xtq/reduce.c and MPI describe them). */
struct p_float_int {
    float v;
    int i;
};
struct p_double_int {
    double v;
    int i;
};
struct p_long_int {
    long v;
    int i;
};
struct p_2int {
    int v;
    int i;
};
struct p_short_int {
    short v;
    int i;
};
struct p_long_double_int {
    long double v;
    int i;
};

struct early {
    int src;
    uint32_t seq;
    uint64_t cnt;
    const void *data;
};

struct sim_rank {
    int rank;
    struct coll_params p;
    struct coll_sched s;
    struct coll_exec e;
    uint8_t *in, *work, *scratch, *stash;
    uint32_t *send_left;
    uint8_t *send_fired;
    int posted, failed;
    uint32_t recvs_done, sends_delivered;
    int completed;
    struct early *early;
    uint32_t nearly;
    struct sim *sim;
};

struct msg {
    int src, dst;
    uint32_t send_index;
};

struct sim {
    const struct sim_case *c;
    struct sim_result *res;
    struct sim_rank *r;
    struct msg *net;
    size_t nnet, capnet;
    uint64_t rng;
    size_t esize;
};

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void failf(struct sim *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(struct sim *m, const char *fmt, ...)
{
    va_list ap;
    if (m->res->err)
        return;
    m->res->err = -1;
    va_start(ap, fmt);
    vsnprintf(m->res->why, sizeof(m->res->why), fmt, ap);
    va_end(ap);
}

/* ---- inputs ------------------------------------------------------------------- */

/* One element of rank r's input. Exact inputs make every reduction order
 * give the same bits: small integers for sums, units for products. */
static void gen_elem(const struct sim_case *c, int r, uint64_t i, void *out, uint64_t *rng)
{
    uint64_t x = rnd(rng);
    int small = (int)(x % 17) - 8;           /* -8..8 */
    int unit = (x >> 8) & 1 ? 1 : -1;        /* products: +-1 ... */
    int pow2 = (x >> 9) % 4 == 0 ? 2 : unit; /* ... and a few 2s */
    int prod = c->op == XTQ_OP_PROD;
    double real =
        c->exact ? (prod ? pow2 : small) : (double)(int64_t)(x % 2000001) / 1024.0 - 977.0;

    if (small == 0 && !prod)
        small = 1; /* no signed zeros: max(+0,-0) is not order-free */
    if (c->exact && !prod)
        real = small;
    switch (c->type) {
    case XTQ_DT_INT8:
    case XTQ_DT_UINT8:
    case XTQ_DT_BYTE:
        *(uint8_t *)out = (uint8_t)x;
        break;
    case XTQ_DT_INT16:
    case XTQ_DT_UINT16:
        *(uint16_t *)out = (uint16_t)x;
        break;
    case XTQ_DT_INT32:
    case XTQ_DT_UINT32:
        *(uint32_t *)out = (uint32_t)x;
        break;
    case XTQ_DT_INT64:
    case XTQ_DT_UINT64:
        *(uint64_t *)out = x;
        break;
    case XTQ_DT_BOOL:
        *(_Bool *)out = (x >> 3) & 1;
        break;
    case XTQ_DT_FLOAT16:
    case XTQ_DT_BFLOAT16: {
        /* Through xtq_reduce_local's own conversion: SUM of a zero vector
         * with REPLACE would do; simplest is to encode directly. */
        float f = (float)(prod ? unit : real);
        uint32_t b;
        memcpy(&b, &f, 4);
        if (c->type == XTQ_DT_BFLOAT16) {
            *(uint16_t *)out = (uint16_t)(b >> 16); /* exact: small integers */
        } else {
            /* binary16 of a small integer or +-1 (exact). */
            uint32_t sign = (b >> 31) & 1, exp = (b >> 23) & 0xff, man = b & 0x7fffff;
            uint16_t h = (uint16_t)(sign << 15);
            if (exp != 0)
                h |= (uint16_t)(((exp - 127 + 15) << 10) | (man >> 13));
            *(uint16_t *)out = h;
        }
        break;
    }
    case XTQ_DT_FLOAT:
        *(float *)out = (float)real;
        break;
    case XTQ_DT_DOUBLE:
        *(double *)out = real;
        break;
    case XTQ_DT_LONG_DOUBLE:
        memset(out, 0, sizeof(long double));
        *(long double *)out = real;
        break;
    case XTQ_DT_C_FLOAT_COMPLEX:
    case XTQ_DT_C_DOUBLE_COMPLEX:
    case XTQ_DT_C_LONG_DOUBLE_COMPLEX: {
        double re = real, im = (double)((int)((x >> 20) % 17) - 8);
        if (prod && c->exact) { /* units: 1, -1, i, -i */
            re = (x >> 20) & 1 ? unit : 0;
            im = (x >> 20) & 1 ? 0 : unit;
        } else if (!c->exact) {
            im = (double)(int64_t)((x >> 20) % 2000001) / 1024.0 - 977.0;
        }
        if (c->type == XTQ_DT_C_FLOAT_COMPLEX)
            *(float complex *)out = (float)re + (float)im * I;
        else if (c->type == XTQ_DT_C_DOUBLE_COMPLEX)
            *(double complex *)out = re + im * I;
        else {
            memset(out, 0, sizeof(long double complex));
            *(long double complex *)out = (long double)re + (long double)im * I;
        }
        break;
    }
    /* Pairs: values with many ties, the rank as the index. */
    case XTQ_DT_FLOAT_INT:
        memset(out, 0, sizeof(struct p_float_int));
        ((struct p_float_int *)out)->v = (float)(x % 5), ((struct p_float_int *)out)->i = r;
        break;
    case XTQ_DT_DOUBLE_INT:
        memset(out, 0, sizeof(struct p_double_int));
        ((struct p_double_int *)out)->v = (double)(x % 5), ((struct p_double_int *)out)->i = r;
        break;
    case XTQ_DT_LONG_INT:
        memset(out, 0, sizeof(struct p_long_int));
        ((struct p_long_int *)out)->v = (long)(x % 5), ((struct p_long_int *)out)->i = r;
        break;
    case XTQ_DT_2INT:
        ((struct p_2int *)out)->v = (int)(x % 5), ((struct p_2int *)out)->i = r;
        break;
    case XTQ_DT_SHORT_INT:
        memset(out, 0, sizeof(struct p_short_int));
        ((struct p_short_int *)out)->v = (short)(x % 5), ((struct p_short_int *)out)->i = r;
        break;
    case XTQ_DT_LONG_DOUBLE_INT:
        memset(out, 0, sizeof(struct p_long_double_int));
        ((struct p_long_double_int *)out)->v = (long double)(x % 5);
        ((struct p_long_double_int *)out)->i = r;
        break;
    default:
        break;
    }
    (void)i;
}

/* Bytes of an element that carry its value (not padding). */
static int significant(enum xtq_datatype t, size_t byte, size_t esize)
{
    size_t b = byte % esize;
    switch (t) {
    case XTQ_DT_LONG_DOUBLE:
        return b < 10;
    case XTQ_DT_C_LONG_DOUBLE_COMPLEX:
        return b % sizeof(long double) < 10;
    case XTQ_DT_LONG_DOUBLE_INT:
        return b < 10 || (b >= offsetof(struct p_long_double_int, i) &&
                          b < offsetof(struct p_long_double_int, i) + sizeof(int));
    case XTQ_DT_DOUBLE_INT:
        return b < 12;
    case XTQ_DT_LONG_INT:
        return b < 12;
    case XTQ_DT_SHORT_INT:
        return b < 2 || b >= 4;
    default:
        return 1;
    }
}

/* First differing element of two vectors, or -1. Complex products of
 * exact inputs still differ in the sign of zero parts with the order
 * (-1 + 0i times -1 + 0i has -0 for its imaginary part): compared by value. */
static int64_t differ(const struct sim_case *c, const uint8_t *a, const uint8_t *b, uint64_t count,
                      size_t esize)
{
    if (c->exact && (c->type == XTQ_DT_C_FLOAT_COMPLEX || c->type == XTQ_DT_C_DOUBLE_COMPLEX ||
                     c->type == XTQ_DT_C_LONG_DOUBLE_COMPLEX)) {
        for (uint64_t i = 0; i < count; i++) {
            const void *x = a + i * esize, *y = b + i * esize;
            int same;
            if (c->type == XTQ_DT_C_FLOAT_COMPLEX)
                same = *(const float complex *)x == *(const float complex *)y;
            else if (c->type == XTQ_DT_C_DOUBLE_COMPLEX)
                same = *(const double complex *)x == *(const double complex *)y;
            else
                same = *(const long double complex *)x == *(const long double complex *)y;
            if (!same)
                return (int64_t)i;
        }
        return -1;
    }
    for (uint64_t i = 0; i < count * esize; i++)
        if (a[i] != b[i] && significant(c->type, i, esize))
            return (int64_t)(i / esize);
    return -1;
}

/* ---- the network and the ranks -------------------------------------------------- */

static void deliver(struct sim *m, size_t k);

static void fire(struct sim *m, struct sim_rank *r, uint32_t si)
{
    const struct coll_op *op = &r->s.ops[r->s.send_op[si]];
    if (r->send_fired[si]++) {
        failf(m, "rank %d send %u fired twice", r->rank, si);
        return;
    }
    if (m->nnet == m->capnet) {
        m->capnet = m->capnet ? m->capnet * 2 : 256;
        m->net = realloc(m->net, m->capnet * sizeof(*m->net));
    }
    m->net[m->nnet++] = (struct msg){r->rank, op->peer, si};
    if (m->c->immediate && m->r[op->peer].posted)
        deliver(m, m->nnet - 1);
}

static void on_dep_done(struct coll_exec *e, uint32_t si)
{
    struct sim_rank *r = e->user;
    if (r->send_left[si] == 0) {
        failf(r->sim, "rank %d send %u: more dependencies done than it has", r->rank, si);
        return;
    }
    if (--r->send_left[si] == 0)
        fire(r->sim, r, si);
}

static void on_recv_done(struct coll_exec *e, uint32_t ri)
{
    struct sim_rank *r = e->user;
    (void)ri;
    r->recvs_done++;
}

static const struct coll_exec_ops sim_exec_ops = {on_dep_done, on_recv_done};

/* A rank whose receives all ran and whose sends were all delivered has
 * completed the call. Every other rank must have posted by then: the
 * runtime reuses a slot two windows later without any credit on that. */
static void check_completions(struct sim *m)
{
    int n = m->c->nranks, unposted = -1;
    if (m->c->bad_rank >= 0)
        return;
    for (int i = 0; i < n; i++)
        if (!m->r[i].posted)
            unposted = i;
    for (int i = 0; i < n; i++) {
        struct sim_rank *r = &m->r[i];
        if (r->completed || !r->posted || r->recvs_done != r->s.nrecvs ||
            r->sends_delivered != r->s.nsends)
            continue;
        r->completed = 1;
        if (unposted >= 0)
            failf(m, "rank %d completed before rank %d posted", i, unposted);
    }
}

/* Same call on both ends? (What the runtime's header check compares.) */
static int same_call(const struct sim_rank *a, const struct sim_rank *b)
{
    return a->p.count == b->p.count && a->p.kind == b->p.kind && a->p.alg == b->p.alg &&
           a->p.root == b->p.root && a->p.handshake == b->p.handshake &&
           a->p.piece_elems == b->p.piece_elems;
}

/* A piece still in its sender's buffer, read by the receiver (by_reader). */
struct reader {
    struct sim *m;
    const uint8_t *base; /* the sender's piece */
    uint8_t *into_place; /* where a copying receive's elements go */
};

static int sim_read(const struct coll_src *src, uint64_t off, void *dst, size_t bytes)
{
    const struct reader *rd = src->ctx;
    rd->m->res->reads++;
    rd->m->res->read_bytes += bytes;
    if ((uint8_t *)dst == rd->into_place + off)
        rd->m->res->copy_reads++;
    memcpy(dst, rd->base + off, bytes);
    return 0;
}

/* A message (or a kept one) meets its receive. */
static void match(struct sim *m, struct sim_rank *r, int src, uint32_t seq, uint64_t cnt,
                  const void *data, int stashed, const struct coll_src *rsrc)
{
    struct sim_rank *from = &m->r[src];
    int64_t ri;

    if (r->failed)
        return;
    if (!same_call(r, from)) {
        r->failed = 1;
        m->res->detected++;
        return;
    }
    ri = coll_sched_lookup(&r->s, src, seq);
    if (ri < 0) {
        failf(m, "rank %d: message %u from %d matches no receive", r->rank, seq, src);
        return;
    }
    const struct coll_op *op = &r->s.ops[r->s.recv_op[ri]];
    if (op->cnt != cnt) {
        failf(m, "rank %d: receive %lld expects %llu elements, %d sent %llu", r->rank,
              (long long)ri, (unsigned long long)op->cnt, src, (unsigned long long)cnt);
        return;
    }
    if (op->type == COLL_OP_RECV_COPY && (atomic_load(&r->e.rstate[ri]) & COLL_RS_PREDS) != 0) {
        failf(m,
              "rank %d: copy %lld (step %u) from %d arrived before the receives it "
              "overwrites ran",
              r->rank, (long long)ri, op->step, src);
        return;
    }
    int rc;
    if (rsrc) {
        struct reader *rd = rsrc->ctx;
        rd->into_place = (uint8_t *)r->e.buf[op->buf] + op->off * m->esize;
        rc = coll_exec_arrive_src(&r->e, (uint32_t)ri, rsrc);
    } else {
        rc = coll_exec_arrive(&r->e, (uint32_t)ri, data, stashed);
    }
    if (rc)
        failf(m, "rank %d: receive %lld: %s (stash %llu of %llu bytes)", r->rank, (long long)ri,
              xtq_strerror(rc), (unsigned long long)atomic_load(&r->e.stash_used),
              (unsigned long long)r->e.stash_cap);
}

static void deliver(struct sim *m, size_t k)
{
    struct msg g = m->net[k];
    struct sim_rank *from = &m->r[g.src], *to = &m->r[g.dst];
    const struct coll_op *op = &from->s.ops[from->s.send_op[g.send_index]];
    size_t bytes = op->cnt * m->esize;
    void *data = bytes ? malloc(bytes) : NULL;

    m->net[k] = m->net[--m->nnet];
    from->sends_delivered++;
    struct reader rd = {m, (uint8_t *)from->e.buf[op->buf] + op->off * m->esize, NULL};
    struct coll_src rsrc = {.read = sim_read, .ctx = &rd};
    /* Read the sender's buffer now: as late as a transport may (by_reader:
     * the receiver reads it itself, now). */
    if (bytes && !m->c->by_reader)
        memcpy(data, rd.base, bytes);
    m->res->msgs++;
    m->res->bytes += bytes;
    if (!to->posted) {
        void *keep = NULL;
        if (bytes) {
            keep = coll_exec_stash_alloc(&to->e, bytes);
            if (!keep && m->c->bad_rank >= 0) {
                /* A mismatched peer sent more than this call can keep:
                 * the runtime fails the instance (and aborts the rest). */
                to->failed = 1;
                m->res->detected++;
                free(data);
                return;
            }
            if (!keep) {
                failf(m, "rank %d: stash full before the post (%llu bytes, bound %llu)", to->rank,
                      (unsigned long long)atomic_load(&to->e.stash_used),
                      (unsigned long long)to->s.stash_bound);
                free(data);
                return;
            }
            if (m->c->by_reader)
                (void)coll_src_copy(&rsrc, 0, keep, bytes);
            else
                memcpy(keep, data, bytes);
        }
        to->early = realloc(to->early, (to->nearly + 1) * sizeof(*to->early));
        to->early[to->nearly++] = (struct early){g.src, op->seq, op->cnt, keep};
    } else {
        match(m, to, g.src, op->seq, op->cnt, data, 0, m->c->by_reader ? &rsrc : NULL);
    }
    free(data);
}

static void post(struct sim *m, struct sim_rank *r)
{
    const struct coll_sched *s = &r->s;

    for (unsigned k = 0; k < s->nprologue; k++) {
        const struct coll_copy *c = &s->prologue[k];
        memcpy((uint8_t *)r->e.buf[c->dst] + c->dst_off * m->esize,
               (uint8_t *)r->e.buf[c->src] + c->src_off * m->esize, c->cnt * m->esize);
    }
    r->posted = 1;
    for (uint32_t k = 0; k < r->nearly; k++)
        match(m, r, r->early[k].src, r->early[k].seq, r->early[k].cnt, r->early[k].data, 1, NULL);
    for (uint32_t si = 0; si < s->nsends; si++)
        if (s->ops[s->send_op[si]].ndeps == 0)
            fire(m, r, si);
}

void sim_run(const struct sim_case *c, struct sim_result *res)
{
    struct sim m;
    int n = c->nranks;
    uint8_t *ref = NULL;
    uint64_t rng;

    memset(res, 0, sizeof(*res));
    memset(&m, 0, sizeof(m));
    m.c = c;
    m.res = res;
    m.rng = c->seed * 0x9e3779b97f4a7c15ull + 1;
    m.esize = xtq_datatype_size(c->type);
    m.r = calloc((size_t)n, sizeof(*m.r));

    for (int i = 0; i < n; i++) {
        struct sim_rank *r = &m.r[i];
        struct coll_params *p = &r->p;
        uint64_t count = i == c->bad_rank ? c->bad_count : c->count;
        int rc;

        r->rank = i;
        r->sim = &m;
        p->kind = c->kind;
        p->alg = c->alg;
        if (i == c->bad_rank && c->bad_alg != XTQ_COLL_ALG_AUTO) {
            p->alg = c->bad_alg;
            p->handshake = c->bad_alg == XTQ_COLL_ALG_RING;
        }
        p->nranks = n;
        p->rank = i;
        p->root = c->root;
        p->count = count;
        p->elem_size = (uint32_t)m.esize;
        p->piece_elems = c->piece_elems;
        p->inplace = c->inplace;
        if (!(i == c->bad_rank && c->bad_alg != XTQ_COLL_ALG_AUTO))
            p->handshake = c->handshake;
        rc = coll_sched_build(p, &r->s);
        if (rc) {
            failf(&m, "rank %d: coll_sched_build: %s", i, xtq_strerror(rc));
            goto out;
        }
        if (r->s.stash_bound > res->stash_bound)
            res->stash_bound = r->s.stash_bound;
        rc = coll_exec_alloc(&r->e, &r->s);
        if (rc) {
            failf(&m, "coll_exec_alloc: %s", xtq_strerror(rc));
            goto out;
        }
        r->in = calloc(count + 1, m.esize);
        r->work = calloc(count + 1, m.esize);
        r->scratch = calloc(r->s.scratch_elems + 1, m.esize);
        /* Exactly the bound: using more fails the case. */
        r->stash = malloc(r->s.stash_bound + 1);
        r->send_left = calloc(r->s.nsends + 1, sizeof(uint32_t));
        r->send_fired = calloc(r->s.nsends + 1, 1);
        rng = c->seed ^ ((uint64_t)(i + 1) << 32) ^ 0x5bd1e995;
        for (uint64_t k = 0; k < count; k++)
            gen_elem(c, i, k, r->in + k * m.esize, &rng);
        r->e.ops = &sim_exec_ops;
        r->e.user = r;
        r->e.type = c->type;
        r->e.op = c->op;
        r->e.esize = m.esize;
        r->e.stash = r->stash;
        r->e.stash_cap = r->s.stash_bound;
        r->e.chunk_bytes = c->chunk_elems * m.esize;
        /* Out of place, the result buffer holds garbage on entry (and so
         * does scratch): a schedule that reads either before writing it
         * gives a wrong answer. */
        memset(r->scratch, 0xA5, (r->s.scratch_elems + 1) * m.esize);
        if (c->inplace) {
            memcpy(r->work, r->in, count * m.esize);
            r->e.buf[COLL_BUF_SEND] = NULL;
        } else {
            memset(r->work, 0xA5, (count + 1) * m.esize);
            r->e.buf[COLL_BUF_SEND] = r->in;
        }
        r->e.buf[COLL_BUF_WORK] = r->work;
        r->e.buf[COLL_BUF_SCRATCH] = r->scratch;
        coll_exec_reset(&r->e);
        for (uint32_t si = 0; si < r->s.nsends; si++)
            r->send_left[si] = r->s.ops[r->s.send_op[si]].ndeps;
    }

    /* Random order of posts and deliveries. */
    for (;;) {
        int unposted = 0;
        for (int i = 0; i < n; i++)
            unposted += !m.r[i].posted;
        if (res->err || (unposted == 0 && m.nnet == 0))
            break;
        uint64_t pick = rnd(&m.rng) % (uint64_t)(m.nnet + (unposted ? 1 : 0));
        if (pick < m.nnet) {
            deliver(&m, (size_t)pick);
            check_completions(&m);
        } else {
            int which = (int)(rnd(&m.rng) % (uint64_t)unposted);
            for (int i = 0; i < n; i++)
                if (!m.r[i].posted && which-- == 0) {
                    post(&m, &m.r[i]);
                    check_completions(&m);
                    break;
                }
        }
    }
    if (res->err)
        goto out;
    for (int i = 0; i < n; i++) {
        struct sim_rank *r = &m.r[i];
        uint64_t peak = atomic_load(&r->e.stash_peak);
        if (peak > res->stash_peak)
            res->stash_peak = peak;
        if (atomic_load(&r->e.error)) {
            failf(&m, "rank %d: %s", i, xtq_strerror(atomic_load(&r->e.error)));
            goto out;
        }
    }
    if (c->bad_rank >= 0)
        goto out; /* the caller looks at res->detected */
    for (int i = 0; i < n; i++) {
        struct sim_rank *r = &m.r[i];
        if (r->recvs_done != r->s.nrecvs) {
            failf(&m, "rank %d: %u of %u receives ran (a hang)", i, r->recvs_done, r->s.nrecvs);
            goto out;
        }
        for (uint32_t si = 0; si < r->s.nsends; si++)
            if (!r->send_fired[si]) {
                failf(&m, "rank %d: send %u never fired", i, si);
                goto out;
            }
    }

    /* The reference: rank 0's input op rank 1's ... in rank order. */
    ref = malloc(c->count * m.esize + 1);
    memcpy(ref, m.r[0].in, c->count * m.esize);
    for (int i = 1; i < n; i++) {
        int rc = xtq_reduce_local(c->op, c->type, ref, m.r[i].in, c->count);
        if (rc) {
            failf(&m, "xtq_reduce_local: %s", xtq_strerror(rc));
            goto out;
        }
    }
    for (int i = 0; i < n; i++) {
        int64_t d;
        if (c->kind == XTQ_COLL_REDUCE && i != c->root)
            continue;
        if (c->exact)
            d = differ(c, m.r[i].work, ref, c->count, m.esize);
        else
            d = differ(c, m.r[i].work, m.r[c->kind == XTQ_COLL_REDUCE ? c->root : 0].work, c->count,
                       m.esize);
        if (d >= 0) {
            failf(&m, "rank %d: element %lld differs from %s", i, (long long)d,
                  c->exact ? "the reference" : "rank 0's");
            goto out;
        }
    }
out:
    for (int i = 0; i < n; i++) {
        struct sim_rank *r = &m.r[i];
        coll_exec_free(&r->e);
        coll_sched_free(&r->s);
        free(r->in);
        free(r->work);
        free(r->scratch);
        free(r->stash);
        free(r->send_left);
        free(r->send_fired);
        free(r->early);
    }
    free(m.r);
    free(m.net);
    free(ref);
}
