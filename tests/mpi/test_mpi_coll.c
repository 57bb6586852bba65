/*
 * MPI_Allreduce, MPI_Reduce, MPI_Iallreduce and MPI_Ireduce as a plain MPI
 * program (it links only MPI): run with the layer preloaded, the calls go
 * to libxtq_coll; with XTQ_MPI=off (or XTQ_MPI_COLL=off), to the MPI.
 * `test_mpi_coll CASE`.
 *
 * XTQ_MPI_TEST_EXPECT: "xtq" (the qualifying calls must have been routed:
 * MPIX_Xtq_coll_counts), "mpi" (none may have been), unset (either).
 * Results are checked against MPI_Reduce_local over every rank's input,
 * in rank order (inputs whose sums and products are exact, so the order
 * of the reduction does not matter).
 */
#include "mpi_test_types.h"

#include <dlfcn.h>
#include <stdlib.h>

typedef int (*coll_counts_fn)(uint64_t *, uint64_t *, uint64_t *);

static const char *expect(void)
{
    const char *e = getenv("XTQ_MPI_TEST_EXPECT");
    return e ? e : "";
}

static bool expect_xtq(void)
{
    return strcmp(expect(), "xtq") == 0;
}

static void counts(uint64_t *routed, uint64_t *passed, uint64_t *failed)
{
    coll_counts_fn f = (coll_counts_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "MPIX_Xtq_coll_counts");
    *routed = *passed = *failed = 0;
    if (f)
        f(routed, passed, failed);
    else if (expect_xtq())
        T_FAIL("XTQ_MPI_TEST_EXPECT=xtq but the layer is not loaded");
}

static void t_init(void)
{
    int provided;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    types_init();
}

/* Every call of the case qualified: check where they went. */
static void t_fini(uint64_t want_routed_min)
{
    uint64_t routed, passed, failed;

    counts(&routed, &passed, &failed);
    if (expect_xtq() && routed < want_routed_min)
        T_FAIL("%llu reductions routed to libxtq_coll, expected at least %llu (%llu passed "
               "through)",
               (unsigned long long)routed, (unsigned long long)want_routed_min,
               (unsigned long long)passed);
    if (strcmp(expect(), "mpi") == 0 && routed)
        T_FAIL("%llu reductions routed, expected none", (unsigned long long)routed);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
}

/* Rank r's input for (type, count): seeds differ per rank. */
static void *input(const struct ttype *t, int count, int r)
{
    void *b = malloc((size_t)(count ? count : 1) * (size_t)t->size);
    T_CHECK(b);
    fill(t, b, count, r * 5 + 1);
    return b;
}

/* What every rank's inputs reduce to, in rank order. */
static void *expected(const struct ttype *t, MPI_Op op, int count, int n)
{
    void *acc = input(t, count, 0);
    for (int r = 1; r < n; r++) {
        void *in = input(t, count, r);
        T_MPI(MPI_Reduce_local(in, acc, count, t->t, op));
        free(in);
    }
    return acc;
}

static void check(const struct ttype *t, const char *opname, const void *got, const void *want,
                  int count, const char *what)
{
    int at = -1;
    if (!same(t, got, want, count, &at))
        T_FAIL("%s %s on %s, count %d: element %d differs", what, opname, t->name, count, at);
}

/* One allreduce, in place or not, checked. */
static void allreduce_one(const struct ttype *t, const struct top *o, int count, bool in_place,
                          MPI_Comm comm)
{
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    void *want = expected(t, o->op, count, n);
    void *mine = input(t, count, me);
    void *out = malloc((size_t)count * (size_t)t->size);
    T_CHECK(out);
    if (in_place) {
        memcpy(out, mine, (size_t)count * (size_t)t->size);
        T_MPI(MPI_Allreduce(MPI_IN_PLACE, out, count, t->t, o->op, comm));
    } else {
        memset(out, 0xa5, (size_t)count * (size_t)t->size);
        T_MPI(MPI_Allreduce(mine, out, count, t->t, o->op, comm));
    }
    check(t, o->name, out, want, count, in_place ? "allreduce in place" : "allreduce");
    free(want);
    free(mine);
    free(out);
}

/* Every valid reduction (not REPLACE / NO_OP) on every type; 1 and 3
 * elements, and 1000 on a third of the pairs; in place and not. */
XTQ_TEST(allreduce_ops_types)
{
    uint64_t calls = 0;
    int k = 0;

    t_init();
    for (int i = 0; i < ntypes; i++)
        for (size_t j = 0; j < sizeof(ops) / sizeof(ops[0]); j++) {
            const struct top *o = &ops[j];
            if (o->op == MPI_REPLACE || o->op == MPI_NO_OP || !valid(o->op, types[i].c))
                continue;
            int counts_[] = {1, 3, 1000};
            int nc = (k++ % 3 == 0) ? 3 : 2;
            for (int c = 0; c < nc; c++)
                for (int ip = 0; ip < 2; ip++) {
                    allreduce_one(&types[i], o, counts_[c], ip, MPI_COMM_WORLD);
                    calls++;
                }
        }
    t_fini(calls);
}

/* Vectors that take each algorithm and the pipelined pieces (up to 4 MiB). */
XTQ_TEST(allreduce_sizes)
{
    const struct ttype *tf = NULL, *td = NULL, *ti = NULL;
    const struct top *sum = &ops[0], *max = &ops[2];
    uint64_t calls = 0;

    t_init();
    for (int i = 0; i < ntypes; i++) {
        if (types[i].t == MPI_FLOAT)
            tf = &types[i];
        if (types[i].t == MPI_DOUBLE)
            td = &types[i];
        if (types[i].t == MPI_INT)
            ti = &types[i];
    }
    const int sizes[] = {2, 17, 4096, 70001, 262144, 1048576};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        allreduce_one(tf, sum, sizes[s], false, MPI_COMM_WORLD);
        allreduce_one(td, max, sizes[s] / 2 + 1, true, MPI_COMM_WORLD);
        allreduce_one(ti, sum, sizes[s], true, MPI_COMM_WORLD);
        calls += 3;
    }
    t_fini(calls);
}

/* A contiguous derived type of one basic type counts as its elements. */
XTQ_TEST(allreduce_contiguous_type)
{
    MPI_Datatype four;
    const struct ttype *td = NULL;
    double *in, *out, *want;
    const int n = 1001;

    t_init();
    for (int i = 0; i < ntypes; i++)
        if (types[i].t == MPI_DOUBLE)
            td = &types[i];
    T_MPI(MPI_Type_contiguous(4, MPI_DOUBLE, &four));
    T_MPI(MPI_Type_commit(&four));
    in = input(td, 4 * n, rank);
    want = expected(td, MPI_SUM, 4 * n, nranks);
    out = calloc(4 * n, sizeof(double));
    T_MPI(MPI_Allreduce(in, out, n, four, MPI_SUM, MPI_COMM_WORLD));
    check(td, "sum", out, want, 4 * n, "allreduce of contiguous(4, double)");
    MPI_Type_free(&four);
    free(in);
    free(out);
    free(want);
    t_fini(1);
}

/* Reduce to every root, in place at the root and not. */
XTQ_TEST(reduce)
{
    const struct top *sum = &ops[0], *minloc = &ops[11];
    uint64_t calls = 0;
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    bool own_mpich;

    t_init();
    /* MPICH 4.0.2's own MPI_Reduce crashes here (SIGSEGV inside libmpich)
     * on MPI_IN_PLACE at root 1 with MPI_INT: where its own path runs, the
     * in-place form is not tried. */
    MPI_Get_library_version(v, &len);
    own_mpich = strstr(v, "MPICH") && strcmp(expect(), "mpi") == 0;
    for (int i = 0; i < ntypes; i++) {
        const struct ttype *t = &types[i];
        const struct top *o = t->c == PAIR ? minloc : valid(MPI_SUM, t->c) ? sum : NULL;
        if (!o)
            continue;
        for (int root = 0; root < nranks; root++)
            for (int ip = 0; ip < (own_mpich ? 1 : 2); ip++) {
                const int count = 777;
                void *want = expected(t, o->op, count, nranks);
                void *mine = input(t, count, rank);
                void *out = malloc((size_t)count * (size_t)t->size);
                if (ip && rank == root) {
                    memcpy(out, mine, (size_t)count * (size_t)t->size);
                    T_MPI(MPI_Reduce(MPI_IN_PLACE, out, count, t->t, o->op, root, MPI_COMM_WORLD));
                } else {
                    /* recvbuf is significant only at the root: NULL elsewhere. */
                    void *rb = rank == root ? out : NULL;
                    T_MPI(MPI_Reduce(mine, rb, count, t->t, o->op, root, MPI_COMM_WORLD));
                }
                if (rank == root)
                    check(t, o->name, out, want, count, ip ? "reduce in place" : "reduce");
                free(want);
                free(mine);
                free(out);
                calls++;
            }
    }
    t_fini(calls);
}

/* Nonblocking: several in flight (more than libxtq_coll's default two),
 * completed with Wait, Waitall, Test loops, Waitany and Waitsome, mixed
 * with the MPI's own requests; Ireduce too. */
XTQ_TEST(iallreduce)
{
    enum { N = 5, COUNT = 3001 };
    const struct ttype *ti = NULL;
    MPI_Request req[N + 1];
    MPI_Status sts[N + 1]; /* GCC 12 reads MPI_STATUSES_IGNORE as a zero-sized array */
    int *in[N], *out[N], *want;
    int token, got = -1, done = 0;

    t_init();
    for (int i = 0; i < ntypes; i++)
        if (types[i].t == MPI_INT)
            ti = &types[i];
    want = expected(ti, MPI_SUM, COUNT, nranks);
    token = rank;
    for (int round = 0; round < 4; round++) {
        for (int k = 0; k < N; k++) {
            in[k] = input(ti, COUNT, rank);
            for (int e = 0; e < COUNT; e++)
                in[k][e] += k;
            out[k] = calloc(COUNT, sizeof(int));
            T_MPI(MPI_Iallreduce(in[k], out[k], COUNT, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[k]));
        }
        /* One of the MPI's own requests among them. */
        T_MPI(
            MPI_Irecv(&got, 1, MPI_INT, (rank + nranks - 1) % nranks, 7, MPI_COMM_WORLD, &req[N]));
        T_MPI(MPI_Send(&token, 1, MPI_INT, (rank + 1) % nranks, 7, MPI_COMM_WORLD));
        switch (round) {
        case 0:
            for (int k = N; k >= 0; k--) /* reverse order */
                T_MPI(MPI_Wait(&req[k], MPI_STATUS_IGNORE));
            break;
        case 1:
            T_MPI(MPI_Waitall(N + 1, req, sts));
            break;
        case 2:
            for (int flag = 0; !flag;)
                T_MPI(MPI_Testall(N + 1, req, &flag, sts));
            break;
        default:
            for (done = 0; done < N + 1;) {
                int idx = -1, outc = 0, idxs[N + 1];
                if (done % 2 == 0) {
                    T_MPI(MPI_Waitany(N + 1, req, &idx, MPI_STATUS_IGNORE));
                    T_CHECK(idx >= 0);
                    done++;
                } else {
                    T_MPI(MPI_Waitsome(N + 1, req, &outc, idxs, sts));
                    T_CHECK(outc > 0);
                    done += outc;
                }
            }
            break;
        }
        if (got != (rank + nranks - 1) % nranks)
            T_FAIL("round %d: received %d from the left neighbour", round, got);
        for (int k = 0; k < N; k++) {
            T_CHECK(req[k] == MPI_REQUEST_NULL);
            for (int e = 0; e < COUNT; e++)
                if (out[k][e] != want[e] + k * nranks)
                    T_FAIL("round %d, call %d: element %d is %d, expected %d", round, k, e,
                           out[k][e], want[e] + k * nranks);
            free(in[k]);
            free(out[k]);
        }
    }
    /* Ireduce to the last rank, and an Iallreduce completed after a
     * blocking call on the same communicator (MPI forbids freeing an
     * active collective's request: Open MPI refuses it). */
    {
        int *a = input(ti, COUNT, rank), *b = calloc(COUNT, sizeof(int));
        int *c = input(ti, COUNT, rank), *d = calloc(COUNT, sizeof(int));
        MPI_Request r1, r2;
        T_MPI(MPI_Ireduce(a, b, COUNT, MPI_INT, MPI_SUM, nranks - 1, MPI_COMM_WORLD, &r1));
        T_MPI(MPI_Iallreduce(c, d, COUNT, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r2));
        T_MPI(MPI_Wait(&r1, MPI_STATUS_IGNORE));
        if (rank == nranks - 1)
            check(ti, "sum", b, want, COUNT, "ireduce");
        T_MPI(MPI_Allreduce(MPI_IN_PLACE, a, COUNT, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        T_MPI(MPI_Wait(&r2, MPI_STATUS_IGNORE));
        check(ti, "sum", d, want, COUNT, "iallreduce completed after a later call");
        free(a);
        free(b);
        free(c);
        free(d);
    }
    free(want);
    t_fini(4 * N + 3);
}

/* Sub-communicators (split, dup, a subset), each with its own team; freed
 * communicators take their teams with them. */
XTQ_TEST(subcomm)
{
    const struct ttype *tl = NULL;
    const struct top *sum = &ops[0];
    MPI_Comm half, dup, sub;
    MPI_Group wg, g;
    uint64_t calls = 0;

    t_init();
    for (int i = 0; i < ntypes; i++)
        if (types[i].t == MPI_LONG)
            tl = &types[i];
    for (int iter = 0; iter < 3; iter++) {
        T_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, nranks - rank, &half)); /* reversed */
        T_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        allreduce_one(tl, sum, 5000, false, dup);
        calls++;
        int hn;
        MPI_Comm_size(half, &hn);
        allreduce_one(tl, sum, 5000, iter % 2, half);
        calls += hn > 1;
        allreduce_one(tl, sum, 3, true, MPI_COMM_WORLD);
        calls++;
        allreduce_one(tl, sum, 4000, false, dup);
        calls++;
        MPI_Comm_free(&half);
        MPI_Comm_free(&dup);
    }
    /* Ranks 1.. (a group without rank 0), then rank 0 alone (one rank:
     * passes through). */
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int excl[1] = {0};
    MPI_Group_excl(wg, 1, excl, &g);
    T_MPI(MPI_Comm_create(MPI_COMM_WORLD, g, &sub));
    if (sub != MPI_COMM_NULL) {
        int sn;
        MPI_Comm_size(sub, &sn);
        allreduce_one(tl, sum, 2048, false, sub);
        calls += sn > 1;
        MPI_Comm_free(&sub);
    } else {
        allreduce_one(tl, sum, 2048, false, MPI_COMM_SELF);
    }
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    t_fini(calls);
}

/* Ranks that disagree on the count: an error on every rank, not a hang
 * (blocking: the layer's agreement; nonblocking: libxtq_coll's check),
 * and the communicator still works afterwards. */
XTQ_TEST(mismatch)
{
    uint64_t routed, passed, failed;
    int *a, *b, rc, cls = MPI_SUCCESS;
    const int base = 4000;
    MPI_Request r;

    t_init();
    if (!expect_xtq()) {
        /* The MPI's own behaviour with mismatched counts is undefined. */
        MPI_Finalize();
        XTQ_SKIP("mismatched counts are checked only where the layer routes the calls");
    }
    T_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    T_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    a = calloc(base + nranks, sizeof(int));
    b = calloc(base + nranks, sizeof(int));
    for (int round = 0; round < 2; round++) {
        rc = MPI_Allreduce(a, b, base + (rank == 1), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        T_CHECK(rc != MPI_SUCCESS);
        MPI_Error_class(rc, &cls);
        T_CHECK(cls == MPI_ERR_ARG);
        rc = MPI_Reduce(a, b, base, MPI_INT, MPI_SUM, rank == 0 ? 0 : 1, MPI_COMM_WORLD);
        T_CHECK(rc != MPI_SUCCESS);
        /* Nonblocking: the first call makes the team (agreed), the next
         * ones are checked by libxtq_coll at completion. */
        rc = MPI_Iallreduce(a, b, base, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
        T_CHECK(rc == MPI_SUCCESS);
        T_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        rc = MPI_Iallreduce(a, b, base + rank, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
        if (rc == MPI_SUCCESS)
            rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
        T_CHECK(rc != MPI_SUCCESS);
        /* Still usable: a correct call gives the right answer. */
        for (int i = 0; i < base; i++)
            a[i] = rank + i;
        T_MPI(MPI_Allreduce(a, b, base, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        for (int i = 0; i < base; i++)
            T_CHECK(b[i] == nranks * i + nranks * (nranks - 1) / 2);
        memset(a, 0, (size_t)base * sizeof(int));
    }
    counts(&routed, &passed, &failed);
    T_CHECK(failed >= 6);
    free(a);
    free(b);
    t_fini(4);
}

/* XTQ_MPI_COLL_MIN (default 1 MiB): smaller vectors go to the MPI,
 * larger ones to libxtq_coll. */
XTQ_TEST(threshold)
{
    uint64_t r0, p0, f0, r1, p1, f1;
    const int small = 1024, large = (2 << 20) / (int)sizeof(double);
    double *a = calloc(large, sizeof(double)), *b = calloc(large, sizeof(double));

    t_init();
    T_CHECK(a && b);
    for (int i = 0; i < large; i++)
        a[i] = i % 7 + rank;
    counts(&r0, &p0, &f0);
    T_MPI(MPI_Allreduce(a, b, small, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    counts(&r1, &p1, &f1);
    const char *env = getenv("XTQ_MPI_COLL_MIN");
    bool small_routed =
        (uint64_t)small * sizeof(double) >= (env ? strtoull(env, NULL, 0) : 1u << 20);
    if (expect_xtq())
        T_CHECK(small_routed ? r1 == r0 + 1 && p1 == p0 : r1 == r0 && p1 == p0 + 1);
    T_MPI(MPI_Allreduce(a, b, large, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < large; i++)
        T_CHECK(b[i] == nranks * (i % 7) + nranks * (nranks - 1) / 2);
    counts(&r0, &p0, &f0);
    if (expect_xtq())
        T_CHECK(r0 == r1 + 1 && p0 == p1);
    free(a);
    free(b);
    t_fini(1);
}
