/*
 * Schedules (coll_sched.c) and the receive side (coll_exec.c), every rank
 * of a team in one process (coll_sim.c), messages delivered and ranks
 * posting in random orders: every algorithm, 1..17 ranks, counts below
 * and above the rank count, pieces down to one element, in place and
 * not, allreduce and reduce to several roots, with and without the
 * handshake; every operation and type; results the same bits as
 * xtq_reduce_local in rank order (inputs whose reduction is exact) and the
 * same bits on every rank (inputs whose reduction is not); the stash
 * within the bound each schedule states; a mismatched count detected; out
 * of place, no copy of the input before Rabenseifner's and the ring's first
 * message.
 */
#include <stdio.h>

#include <xtq/xtq.h>

#include "coll_sim.h"
#include "xtq_test.h"

static const enum xtq_coll_alg algs[] = {XTQ_COLL_ALG_RD, XTQ_COLL_ALG_RABENSEIFNER,
                                         XTQ_COLL_ALG_RING};

static void run_or_fail(const struct sim_case *c)
{
    struct sim_result res;

    sim_run(c, &res);
    if (res.err)
        XTQ_FAIL("%s %s n=%d count=%llu piece=%llu %s %s root=%d inplace=%d handshake=%d "
                 "seed=%llu: %s",
                 c->kind == XTQ_COLL_REDUCE ? "reduce" : "allreduce", xtq_coll_alg_name(c->alg),
                 c->nranks, (unsigned long long)c->count, (unsigned long long)c->piece_elems,
                 xtq_datatype_name(c->type), xtq_op_name(c->op), c->root, c->inplace, c->handshake,
                 (unsigned long long)c->seed, res.why);
    if (res.stash_peak > res.stash_bound)
        XTQ_FAIL("stash peak %llu above the bound %llu", (unsigned long long)res.stash_peak,
                 (unsigned long long)res.stash_bound);
}

static struct sim_case base(enum xtq_coll_alg alg, int n, uint64_t count)
{
    struct sim_case c = {0};
    c.kind = XTQ_COLL_ALLREDUCE;
    c.alg = alg;
    c.nranks = n;
    c.count = count;
    c.piece_elems = 1u << 20;
    c.type = XTQ_DT_INT32;
    c.op = XTQ_OP_SUM;
    c.exact = 1;
    c.bad_rank = -1;
    c.seed = 1;
    return c;
}

/* Every algorithm at 1..17 ranks, counts around the rank count. */
static void ranks_and_counts(enum xtq_coll_kind kind)
{
    for (unsigned a = 0; a < 3; a++)
        for (int n = 1; n <= 17; n++) {
            uint64_t counts[] = {
                0,  1,  2, 3, (uint64_t)n - 1, (uint64_t)n, (uint64_t)n + 1, 2u * (uint64_t)n + 3,
                64, 257};
            for (unsigned k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                for (int inplace = 0; inplace <= 1; inplace++)
                    for (int hs = 0; hs <= 1; hs++) {
                        struct sim_case c = base(algs[a], n, counts[k]);
                        int roots[] = {0, n - 1, n / 2};
                        c.kind = kind;
                        c.inplace = inplace;
                        c.handshake = hs;
                        c.seed = (uint64_t)(n * 1000 + k * 10 + inplace * 2 + hs);
                        /* Pieces: one element (the most steps), 3, whole. */
                        c.piece_elems = k % 3 == 0 ? 1 : k % 3 == 1 ? 3 : 1u << 20;
                        for (int ri = 0; ri < (kind == XTQ_COLL_REDUCE ? 3 : 1); ri++) {
                            c.root = roots[ri];
                            if (kind == XTQ_COLL_REDUCE && c.root != 0 && inplace)
                                continue;
                            run_or_fail(&c);
                        }
                    }
        }
}

XTQ_TEST(allreduce_every_alg_1_to_17_ranks)
{
    ranks_and_counts(XTQ_COLL_ALLREDUCE);
}

XTQ_TEST(reduce_every_alg_1_to_17_ranks_roots)
{
    ranks_and_counts(XTQ_COLL_REDUCE);
}

/* Many delivery orders of a few shapes that have the most concurrency. */
XTQ_TEST(random_orders)
{
    for (uint64_t seed = 1; seed <= 300; seed++)
        for (unsigned a = 0; a < 3; a++) {
            int n = (int)(seed % 16) + 2;
            struct sim_case c = base(algs[a], n, 3 * (uint64_t)n + seed % 7);
            c.seed = seed;
            c.piece_elems = 1 + seed % 4;
            c.inplace = seed & 1;
            c.handshake = (seed >> 1) & 1;
            c.kind = seed % 3 == 0 ? XTQ_COLL_REDUCE : XTQ_COLL_ALLREDUCE;
            c.root = (int)(seed % (uint64_t)n);
            if (c.kind == XTQ_COLL_REDUCE && c.root != 0)
                c.inplace = 0;
            run_or_fail(&c);
        }
}

/*
 * Receivers that read each piece from the sender's buffer themselves
 * (same-host single copy): every algorithm, in random orders, reductions
 * cut into chunks of 1, 2 or 5 elements, the same bits as the reference;
 * every element moved by exactly one read, and every copying receive that
 * could run read straight into place (no second copy).
 */
XTQ_TEST(receiver_reads_the_sender)
{
    uint64_t place = 0;

    for (uint64_t seed = 1; seed <= 200; seed++)
        for (unsigned a = 0; a < 3; a++) {
            int n = (int)(seed % 9) + 2;
            struct sim_case c = base(algs[a], n, 5 * (uint64_t)n + seed % 11);
            struct sim_result res;
            c.seed = seed;
            c.by_reader = 1;
            c.chunk_elems = seed % 3 == 0 ? 1 : seed % 3 == 1 ? 2 : 5;
            c.piece_elems = seed % 4 == 0 ? 1u << 20 : 1 + seed % 5;
            c.inplace = seed & 1;
            c.handshake = (seed >> 1) & 1;
            c.kind = seed % 5 == 0 ? XTQ_COLL_REDUCE : XTQ_COLL_ALLREDUCE;
            c.root = (int)(seed % (uint64_t)n);
            if (c.kind == XTQ_COLL_REDUCE && c.root != 0)
                c.inplace = 0;
            c.type = seed % 2 ? XTQ_DT_INT32 : XTQ_DT_DOUBLE;
            c.op = seed % 7 == 0 ? XTQ_OP_MAX : XTQ_OP_SUM;
            run_or_fail(&c);
            sim_run(&c, &res);
            if (res.read_bytes != res.bytes)
                XTQ_FAIL("seed %llu: %llu bytes read for %llu bytes sent", (unsigned long long)seed,
                         (unsigned long long)res.read_bytes, (unsigned long long)res.bytes);
            place += res.copy_reads;
        }
    /* Allgather steps read into place (most do; those that came early
     * went to the stash). */
    if (place == 0)
        XTQ_FAIL("no copying receive read straight into place");
}

/* Every operation on every type it applies to (MPI's table), exact. */
/* A peer may answer a message before the completion that released it
 * has returned (another thread; the CI failure of 2026-11-27: a copying
 * receive of Rabenseifner's allgather stashed beyond the bound, "stash
 * full"). Every message here is delivered inside the release; the stash
 * must stay within the schedule's bound and every answer be right. */
XTQ_TEST(replies_inside_the_release)
{
    for (uint64_t seed = 1; seed <= 60; seed++)
        for (unsigned a = 0; a < 3; a++) {
            int n = (int)(seed % 8) + 2;
            struct sim_case c = base(algs[a], n, 7 * (uint64_t)n + seed % 13);
            c.seed = seed;
            c.immediate = 1;
            c.piece_elems = 1 + seed % 4;
            c.inplace = seed & 1;
            c.by_reader = (seed >> 1) & 1;
            c.handshake = algs[a] == XTQ_COLL_ALG_RING;
            run_or_fail(&c);
        }
}

XTQ_TEST(every_op_and_type)
{
    const int ranks[] = {1, 2, 3, 5, 8, 13};
    for (int t = 0; t < XTQ_DT_COUNT; t++)
        for (int o = 0; o < XTQ_OP_COUNT; o++) {
            if (o == XTQ_OP_REPLACE || o == XTQ_OP_NO_OP ||
                !xtq_reduce_supported((enum xtq_op)o, (enum xtq_datatype)t))
                continue;
            for (unsigned a = 0; a < 3; a++)
                for (unsigned k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++) {
                    struct sim_case c = base(algs[a], ranks[k], 37);
                    c.type = (enum xtq_datatype)t;
                    c.op = (enum xtq_op)o;
                    c.inplace = k & 1;
                    c.piece_elems = 5;
                    c.seed = (uint64_t)(t * 100 + o * 7 + (int)k);
                    run_or_fail(&c);
                    c.kind = XTQ_COLL_REDUCE;
                    c.root = ranks[k] - 1;
                    c.inplace = 0;
                    run_or_fail(&c);
                }
        }
}

/* Inputs whose reduction depends on the order: every rank still ends with
 * the same bits (recursive doubling combines lower rank first on both
 * partners; the other algorithms reduce each element once and copy it). */
XTQ_TEST(same_bits_on_every_rank)
{
    const enum xtq_datatype types[] = {XTQ_DT_FLOAT,    XTQ_DT_DOUBLE,          XTQ_DT_FLOAT16,
                                       XTQ_DT_BFLOAT16, XTQ_DT_C_FLOAT_COMPLEX, XTQ_DT_LONG_DOUBLE};
    for (unsigned a = 0; a < 3; a++)
        for (int n = 2; n <= 17; n++)
            for (unsigned t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
                struct sim_case c = base(algs[a], n, 101);
                c.type = types[t];
                c.exact = 0;
                c.op = t % 2 ? XTQ_OP_PROD : XTQ_OP_SUM;
                if (c.type == XTQ_DT_FLOAT16 || c.type == XTQ_DT_BFLOAT16)
                    c.op = XTQ_OP_SUM;
                c.piece_elems = 16;
                c.seed = (uint64_t)(n * 31 + (int)t);
                run_or_fail(&c);
            }
}

/* A rank calling with another count: some rank sees a message whose call
 * differs from its own, whatever the algorithms the two counts choose
 * (its abort then reaches every rank, coll.c). */
XTQ_TEST(mismatched_count_is_detected)
{
    for (unsigned a = 0; a < 3; a++)
        for (unsigned b = 0; b < 3; b++)
            for (int n = 2; n <= 17; n++)
                for (int bad = 0; bad < n; bad += (n > 5 ? 3 : 1)) {
                    struct sim_case c = base(algs[a], n, 40);
                    struct sim_result res;
                    c.bad_rank = bad;
                    c.bad_count = 41 + (uint64_t)b * 17;
                    c.seed = (uint64_t)(n * 7 + bad);
                    c.handshake = algs[a] == XTQ_COLL_ALG_RING;
                    /* The bad rank's algorithm is chosen for its own count:
                     * every pairing of algorithms. */
                    c.bad_alg = algs[b];
                    sim_run(&c, &res);
                    if (res.err)
                        XTQ_FAIL("n=%d bad=%d: %s", n, bad, res.why);
                    if (res.detected == 0)
                        XTQ_FAIL("%s n=%d: a mismatched count at rank %d went unnoticed",
                                 xtq_coll_alg_name(c.alg), n, bad);
                }
}

/* The stash each schedule declares is what the library sizes its slots
 * with; the runs above use exactly that much (more fails them). Here: the
 * bounds are what docs/allreduce.md states. */
XTQ_TEST(stash_bounds)
{
    for (int n = 2; n <= 17; n++) {
        int pof2 = coll_pof2(n), rem = n - pof2, lg = coll_log2(pof2);
        for (int r = 0; r < n; r++) {
            struct coll_params p = {
                XTQ_COLL_ALLREDUCE, XTQ_COLL_ALG_RD, n, r, 0, 1000, 4, 1000, 0, 0};
            struct coll_sched s;
            CHECK_OK(coll_sched_build(&p, &s));
            /* Every exchange, plus the fold. */
            uint64_t steps = (uint64_t)((r < 2 * rem && r % 2 == 0) ? 0 : lg + (r < 2 * rem));
            CHECK_EQ(s.stash_bound, steps * 4000); /* 4000: a multiple of 16 */
            coll_sched_free(&s);
            p.alg = XTQ_COLL_ALG_RING;
            p.handshake = 1;
            CHECK_OK(coll_sched_build(&p, &s));
            CHECK_EQ(s.stash_bound, 0); /* ring + handshake: nothing kept */
            coll_sched_free(&s);
            p.alg = XTQ_COLL_ALG_RABENSEIFNER;
            p.handshake = 0;
            CHECK_OK(coll_sched_build(&p, &s));
            CHECK(s.stash_bound <= 2 * 4000);
            coll_sched_free(&s);
        }
    }
}

/* Out of place, Rabenseifner and the ring copy nothing before the first
 * message: a range's first reduction writes the result buffer from the
 * input and the message (the runs above start from a result buffer full
 * of garbage, so reading it first gives a wrong answer). */
XTQ_TEST(out_of_place_copies_nothing_first)
{
    const enum xtq_coll_alg two[] = {XTQ_COLL_ALG_RABENSEIFNER, XTQ_COLL_ALG_RING};
    for (unsigned a = 0; a < 2; a++)
        for (int kind = 0; kind < 2; kind++)
            for (int n = 2; n <= 17; n++)
                for (int r = 0; r < n; r++) {
                    struct coll_params p = {kind ? XTQ_COLL_REDUCE : XTQ_COLL_ALLREDUCE,
                                            two[a], n, r, n - 1, 1000, 4, 100, 0, 1};
                    struct coll_sched s;
                    CHECK_OK(coll_sched_build(&p, &s));
                    CHECK_EQ(s.nprologue, 0);
                    coll_sched_free(&s);
                }
}

XTQ_TEST(bad_parameters)
{
    struct coll_params p = {XTQ_COLL_REDUCE, XTQ_COLL_ALG_RD, 4, 0, 4, 10, 4, 10, 0, 0};
    struct coll_sched s;
    CHECK_ERR(coll_sched_build(&p, &s), -XTQ_EINVAL); /* root out of range */
    p.root = 0;
    p.rank = 4;
    CHECK_ERR(coll_sched_build(&p, &s), -XTQ_EINVAL);
    p.rank = 0;
    p.piece_elems = 0;
    CHECK_ERR(coll_sched_build(&p, &s), -XTQ_EINVAL);
    p.piece_elems = 1;
    p.alg = XTQ_COLL_ALG_AUTO;
    CHECK_ERR(coll_sched_build(&p, &s), -XTQ_EINVAL);
}
