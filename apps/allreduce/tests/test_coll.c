/*
 * libxtq_coll across processes (mpirun -np N test_coll CASE): every
 * algorithm on host teams at the rank count it is started with, counts
 * below and above it, every operation class, in place, reduce to every
 * root, nonblocking calls in flight together, sub-teams, and mismatched
 * calls that must fail on every rank (no hang, nothing written out of
 * bounds) and leave the team broken. Each rank computes every rank's
 * input itself, so results are checked against xtq_reduce_local applied
 * in rank order (inputs chosen so that any order gives the same bits).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xtq/coll.h>
#include <xtq/xtq.h>

#include "ar_gpu.h"
#include "coll_int.h"
#include "xtq_test.h"

static xtq_ctx_t *ctx;
static xtq_coll_team_t *host_team;
static int rank, size;

static void setup(void)
{
    CHECK_OK(xtq_init(NULL, &ctx));
    rank = xtq_rank(ctx);
    size = xtq_size(ctx);
}

static void teardown(void)
{
    CHECK_OK(xtq_barrier(ctx));
    CHECK_OK(xtq_finalize(ctx));
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Rank r's element i: exact in any order for the op. */
static void input(enum xtq_datatype type, enum xtq_op op, int r, uint64_t i, void *out)
{
    uint64_t x = mix(((uint64_t)r << 40) ^ i ^ ((uint64_t)type << 56) ^ ((uint64_t)op << 60));
    int small = (int)(x % 15) - 7;
    if (small == 0)
        small = 3;
    switch (type) {
    case XTQ_DT_INT32:
        *(int32_t *)out =
            op == XTQ_OP_PROD ? (x & 1 ? 1 : -1) * (int32_t)(1 + (x >> 8) % 3) : (int32_t)x;
        break;
    case XTQ_DT_UINT8:
        *(uint8_t *)out = (uint8_t)x;
        break;
    case XTQ_DT_INT64:
        *(int64_t *)out = (int64_t)x;
        break;
    case XTQ_DT_DOUBLE:
        *(double *)out = op == XTQ_OP_PROD ? (x & 1 ? 2.0 : -1.0) : (double)small;
        break;
    case XTQ_DT_FLOAT:
        *(float *)out = op == XTQ_OP_PROD ? (x & 1 ? 2.0f : -1.0f) : (float)small;
        break;
    case XTQ_DT_DOUBLE_INT: {
        struct {
            double v;
            int i;
        } p;
        memset(&p, 0, sizeof(p));
        p.v = (double)(x % 4);
        p.i = r;
        memcpy(out, &p, sizeof(p));
        break;
    }
    case XTQ_DT_BOOL:
        *(_Bool *)out = (x >> 5) & 1;
        break;
    default:
        memset(out, (int)(x & 0xff), xtq_datatype_size(type));
        break;
    }
}

static void fill(void *buf, enum xtq_datatype type, enum xtq_op op, int r, uint64_t count)
{
    size_t es = xtq_datatype_size(type);
    for (uint64_t i = 0; i < count; i++)
        input(type, op, r, i, (uint8_t *)buf + i * es);
}

static void *reference(enum xtq_datatype type, enum xtq_op op, uint64_t count, int n)
{
    size_t es = xtq_datatype_size(type);
    uint8_t *ref = malloc(count * es + 1), *tmp = malloc(count * es + 1);
    fill(ref, type, op, 0, count);
    for (int r = 1; r < n; r++) {
        fill(tmp, type, op, r, count);
        CHECK_OK(xtq_reduce_local(op, type, ref, tmp, count));
    }
    free(tmp);
    return ref;
}

/* Compare, skipping a pair type's padding. */
static void expect_equal(const void *got, const void *want, enum xtq_datatype type, uint64_t count,
                         const char *what)
{
    size_t es = xtq_datatype_size(type), cmp = type == XTQ_DT_DOUBLE_INT ? 12 : es;
    for (uint64_t i = 0; i < count; i++)
        if (memcmp((const uint8_t *)got + i * es, (const uint8_t *)want + i * es, cmp) != 0)
            XTQ_FAIL("rank %d: %s: element %llu of %llu differs", rank, what, (unsigned long long)i,
                     (unsigned long long)count);
}

static xtq_coll_team_t *team_with(enum xtq_coll_alg alg)
{
    xtq_coll_team_t *t;
    xtq_coll_team_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = XTQ_COLL_TEAM_ATTR_FIELD_ALG;
    a.alg = alg;
    CHECK_OK(xtq_coll_team_create(ctx, &a, &t));
    return t;
}

static void one(xtq_coll_team_t *t, enum xtq_coll_kind kind, uint64_t count, enum xtq_datatype type,
                enum xtq_op op, int inplace, int root)
{
    size_t es = xtq_datatype_size(type);
    uint8_t *in = malloc(count * es + 16), *out = malloc(count * es + 16);
    void *ref = reference(type, op, count, size);
    char what[160];
    int rc;

    fill(in, type, op, rank, count);
    memset(out, 0xa5, count * es + 16);
    if (inplace)
        memcpy(out, in, count * es);
    if (kind == XTQ_COLL_ALLREDUCE)
        rc = xtq_coll_allreduce(t, inplace ? XTQ_COLL_IN_PLACE : in, out, count, type, op);
    else
        rc = xtq_coll_reduce(t, inplace ? XTQ_COLL_IN_PLACE : in, out, count, type, op, root);
    snprintf(what, sizeof(what), "%s %s count %llu %s %s%s root %d",
             kind == XTQ_COLL_ALLREDUCE ? "allreduce" : "reduce",
             xtq_coll_alg_name(xtq_coll_algorithm(t, kind, count, type)), (unsigned long long)count,
             xtq_datatype_name(type), xtq_op_name(op), inplace ? " in place" : "", root);
    if (rc)
        XTQ_FAIL("rank %d: %s: %s", rank, what, xtq_strerror(rc));
    if (kind == XTQ_COLL_ALLREDUCE || rank == root)
        expect_equal(out, ref, type, count, what);
    /* Nothing written past the vector. */
    for (size_t b = count * es; b < count * es + 16; b++)
        if (kind == XTQ_COLL_ALLREDUCE || rank == root)
            if (out[b] != 0xa5)
                XTQ_FAIL("rank %d: %s: byte %zu past the vector written", rank, what, b);
    free(in);
    free(out);
    free(ref);
}

static const enum xtq_coll_alg algs[] = {XTQ_COLL_ALG_RD, XTQ_COLL_ALG_RABENSEIFNER,
                                         XTQ_COLL_ALG_RING};

/* Every algorithm, counts around the rank count and pieces, in place. */
XTQ_TEST(algorithms)
{
    setup();
    for (unsigned a = 0; a < 3; a++) {
        xtq_coll_team_t *t = team_with(algs[a]);
        uint64_t counts[] = {0, 1, (uint64_t)size - 1, (uint64_t)size + 1, 1000, 70001};
        for (unsigned k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
            for (int inplace = 0; inplace <= 1; inplace++)
                one(t, XTQ_COLL_ALLREDUCE, counts[k], XTQ_DT_INT32, XTQ_OP_SUM, inplace, 0);
        CHECK_OK(xtq_coll_team_destroy(t));
    }
    teardown();
}

/* XTQ_COLL_TRIGGERS=auto (the default) chains a host team's steps by the
 * engine's triggered puts (its probe passes here), and a vector of large
 * pieces (put XTQ_PUT_LONG_TASK, reduced by workers) and one of small
 * pieces (reduced where they arrive) give the right sums. */
XTQ_TEST(triggers_default)
{
    const char *env = getenv("XTQ_COLL_TRIGGERS");
    if (env && strcmp(env, "auto") != 0)
        XTQ_SKIP("XTQ_COLL_TRIGGERS=%s is set: the default is not what runs", env);
    setup();
    xtq_coll_team_t *t;
    CHECK_OK(xtq_coll_team_create(ctx, NULL, &t));
    CHECK_EQ(xtq_coll_team_triggers(t), XTQ_COLL_TRIGGERS_ENGINE);
    one(t, XTQ_COLL_ALLREDUCE, 70001, XTQ_DT_INT32, XTQ_OP_SUM, 0, 0);
    one(t, XTQ_COLL_ALLREDUCE, 300000, XTQ_DT_FLOAT, XTQ_OP_SUM, 0, 0);
    CHECK_OK(xtq_coll_team_destroy(t));
    teardown();
}

/* Reduce to every root, every algorithm. */
XTQ_TEST(reduce_roots)
{
    setup();
    for (unsigned a = 0; a < 3; a++) {
        xtq_coll_team_t *t = team_with(algs[a]);
        for (int root = 0; root < size; root++) {
            one(t, XTQ_COLL_REDUCE, 333, XTQ_DT_INT64, XTQ_OP_BXOR, 0, root);
            one(t, XTQ_COLL_REDUCE, 5, XTQ_DT_DOUBLE, XTQ_OP_MAX, rank == root, root);
        }
        CHECK_OK(xtq_coll_team_destroy(t));
    }
    teardown();
}

/* One operation of each class on its types. */
XTQ_TEST(op_classes)
{
    static const struct {
        enum xtq_datatype type;
        enum xtq_op op;
    } pairs[] = {
        {XTQ_DT_INT32, XTQ_OP_PROD},
        {XTQ_DT_DOUBLE, XTQ_OP_SUM},
        {XTQ_DT_FLOAT, XTQ_OP_PROD},
        {XTQ_DT_INT32, XTQ_OP_MIN},
        {XTQ_DT_UINT8, XTQ_OP_LAND},
        {XTQ_DT_UINT8, XTQ_OP_BOR},
        {XTQ_DT_BYTE, XTQ_OP_BAND},
        {XTQ_DT_BOOL, XTQ_OP_LXOR},
        {XTQ_DT_DOUBLE_INT, XTQ_OP_MAXLOC},
        {XTQ_DT_DOUBLE_INT, XTQ_OP_MINLOC},
        {XTQ_DT_C_DOUBLE_COMPLEX, XTQ_OP_SUM},
    };
    setup();
    xtq_coll_team_t *t = team_with(XTQ_COLL_ALG_AUTO);
    for (unsigned k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
        one(t, XTQ_COLL_ALLREDUCE, 17, pairs[k].type, pairs[k].op, k & 1, 0);
        one(t, XTQ_COLL_ALLREDUCE, 20000, pairs[k].type, pairs[k].op, 0, 0);
    }
    /* Not reductions in MPI: refused. */
    int32_t x = 1, y;
    CHECK_ERR(xtq_coll_allreduce(t, &x, &y, 1, XTQ_DT_INT32, XTQ_OP_REPLACE), -XTQ_EINVAL);
    CHECK_ERR(xtq_coll_allreduce(t, &x, &y, 1, XTQ_DT_DOUBLE, XTQ_OP_BAND), -XTQ_EINVAL);
    CHECK_OK(xtq_coll_team_destroy(t));
    teardown();
}

/* Several nonblocking calls in flight (more than XTQ_COLL_INFLIGHT), waited
 * for in reverse order; mixed sizes so the algorithms differ. */
XTQ_TEST(nonblocking)
{
    enum { N = 7 };
    xtq_coll_req_t *req[N];
    int32_t *in[N], *out[N];
    uint64_t count[N];
    setup();
    xtq_coll_team_t *t = team_with(XTQ_COLL_ALG_AUTO);
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < N; k++) {
            count[k] = k % 3 == 0 ? 3 : k % 3 == 1 ? 9000 : 300000;
            in[k] = malloc(count[k] * 4);
            out[k] = malloc(count[k] * 4);
            fill(in[k], XTQ_DT_INT32, XTQ_OP_SUM, rank, count[k]);
            CHECK_OK(
                xtq_coll_iallreduce(t, in[k], out[k], count[k], XTQ_DT_INT32, XTQ_OP_SUM, &req[k]));
        }
        for (int k = N - 1; k >= 0; k--) {
            CHECK_OK(xtq_coll_wait(req[k], XTQ_TIMEOUT_INFINITE));
            void *ref = reference(XTQ_DT_INT32, XTQ_OP_SUM, count[k], size);
            expect_equal(out[k], ref, XTQ_DT_INT32, count[k], "iallreduce");
            free(ref);
            free(in[k]);
            free(out[k]);
        }
    }
    CHECK_OK(xtq_coll_team_destroy(t));
    teardown();
}

/* Reduces in flight at once: a non-root rank works in a vector of the
 * library's own, one per instance (a vector shared by the team mixed the
 * instances' data, and a larger call freed it under a smaller one). */
XTQ_TEST(nonblocking_reduce)
{
    enum { N = 6 };
    xtq_coll_req_t *req[N];
    void *in[N], *out[N];
    uint64_t count[N];
    enum xtq_datatype type[N];
    setup();
    xtq_coll_team_t *t = team_with(XTQ_COLL_ALG_AUTO);
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < N; k++) {
            type[k] = k % 2 ? XTQ_DT_DOUBLE : XTQ_DT_INT64;
            count[k] = (uint64_t)(1000 + 20000 * k + 7 * round);
            size_t bytes = count[k] * xtq_datatype_size(type[k]);
            in[k] = malloc(bytes);
            out[k] = malloc(bytes);
            fill(in[k], type[k], XTQ_OP_SUM, rank, count[k]);
            CHECK_OK(xtq_coll_ireduce(t, in[k], rank == 0 ? out[k] : NULL, count[k], type[k],
                                      XTQ_OP_SUM, 0, &req[k]));
        }
        for (int k = 0; k < N; k++) {
            CHECK_OK(xtq_coll_wait(req[k], XTQ_TIMEOUT_INFINITE));
            if (rank == 0) {
                void *ref = reference(type[k], XTQ_OP_SUM, count[k], size);
                expect_equal(out[k], ref, type[k], count[k], "ireduce");
                free(ref);
            }
            free(in[k]);
            free(out[k]);
        }
    }
    CHECK_OK(xtq_coll_team_destroy(t));
    teardown();
}

/* Teams of some ranks: even ranks and odd ranks, each on their own. */
XTQ_TEST(subteams)
{
    int ranks[64], n = 0;
    xtq_coll_team_attr_t a;
    xtq_coll_team_t *t;
    setup();
    for (int r = rank % 2; r < size && n < 64; r += 2)
        ranks[n++] = r;
    memset(&a, 0, sizeof(a));
    a.field_mask = XTQ_COLL_TEAM_ATTR_FIELD_RANKS | XTQ_COLL_TEAM_ATTR_FIELD_INDEX;
    a.ranks = ranks;
    a.nranks = n;
    a.index = 40;
    CHECK_OK(xtq_coll_team_create(ctx, &a, &t));
    CHECK_EQ(xtq_coll_team_size(t), n);
    CHECK_EQ(xtq_coll_team_rank(t), rank / 2);
    for (int k = 0; k < 3; k++) {
        int64_t x = rank, sum = 0;
        CHECK_OK(xtq_coll_allreduce(t, &x, &sum, 1, XTQ_DT_INT64, XTQ_OP_SUM));
        int64_t want = 0;
        for (int i = 0; i < n; i++)
            want += ranks[i];
        CHECK_EQ(sum, want);
    }
    CHECK_OK(xtq_coll_team_destroy(t));
    teardown();
}

/* Mismatched calls: every rank gets -XTQ_EPROTO, the team stays broken,
 * and nothing past any rank's vector is written. argv: count | type | op |
 * root, and an algorithm. */
XTQ_TEST(mismatch)
{
    const char *what = xtq_test_argc > 0 ? xtq_test_argv[0] : "count";
    enum xtq_coll_alg alg = XTQ_COLL_ALG_AUTO;
    uint64_t count = 5000;
    enum xtq_datatype type = XTQ_DT_INT32;
    enum xtq_op op = XTQ_OP_SUM;
    enum xtq_coll_kind kind = XTQ_COLL_ALLREDUCE;
    int root = 0, bad;

    for (int a = 1; a < XTQ_COLL_ALG_COUNT; a++)
        if (xtq_test_argc > 1 && strcmp(xtq_test_argv[1], xtq_coll_alg_name(a)) == 0)
            alg = (enum xtq_coll_alg)a;
    setup();
    if (size < 2)
        XTQ_SKIP("needs 2 ranks");
    bad = size - 1;
    xtq_coll_team_t *t = team_with(alg);
    one(t, XTQ_COLL_ALLREDUCE, 64, XTQ_DT_INT32, XTQ_OP_SUM, 0, 0); /* a good one first */
    if (rank == bad) {
        if (strcmp(what, "count") == 0)
            count = 7; /* another algorithm at auto */
        else if (strcmp(what, "count_near") == 0)
            count = 5001;
        else if (strcmp(what, "type") == 0)
            type = XTQ_DT_FLOAT;
        else if (strcmp(what, "op") == 0)
            op = XTQ_OP_MAX;
    }
    if (strcmp(what, "root") == 0) {
        kind = XTQ_COLL_REDUCE;
        root = rank == bad ? 1 : 0;
    }
    size_t es = xtq_datatype_size(type);
    uint8_t *in = calloc(count + 64, es), *out = malloc((count + 64) * es);
    memset(out, 0x5a, (count + 64) * es);
    int rc = kind == XTQ_COLL_ALLREDUCE ? xtq_coll_allreduce(t, in, out, count, type, op)
                                        : xtq_coll_reduce(t, in, out, count, type, op, root);
    printf("rank %d: mismatched %s: %s\n", rank, what, xtq_strerror(rc));
    if (rc != -XTQ_EPROTO)
        XTQ_FAIL("rank %d: mismatched %s returned %d (%s), expected -XTQ_EPROTO", rank, what, rc,
                 xtq_errname(rc));
    for (size_t b = count * es; b < (count + 64) * es; b++)
        if (out[b] != 0x5a)
            XTQ_FAIL("rank %d: byte %zu past the vector written", rank, b);
    int32_t x = 1, y;
    CHECK_ERR(xtq_coll_allreduce(t, &x, &y, 1, XTQ_DT_INT32, XTQ_OP_SUM), -XTQ_EPROTO);
    xtq_coll_team_destroy(t);
    free(in);
    free(out);
    teardown();
}

/* A failed call with more calls queued behind it than XTQ_COLL_INFLIGHT
 * lets start: the queued ones fail too (the team is broken from the
 * first), each on every rank, and none waits for a slot the failed ones
 * never handed on (they used to, for ever). Waited for last first. */
XTQ_TEST(mismatch_queued)
{
    enum { N = 6 };
    xtq_coll_req_t *req[N];
    int32_t in[N][64], out[N][64];
    setup();
    if (size < 2)
        XTQ_SKIP("needs 2 ranks");
    xtq_coll_team_t *t = team_with(XTQ_COLL_ALG_AUTO);
    one(t, XTQ_COLL_ALLREDUCE, 64, XTQ_DT_INT32, XTQ_OP_SUM, 0, 0); /* a good one first */
    memset(in, 0, sizeof(in));
    for (int k = 0; k < N; k++) {
        uint64_t count = k == 0 && rank == size - 1 ? 7 : 64; /* the first call mismatched */
        /* A call made once this rank knows of the failure is refused at
         * once: as good as failing later. */
        int rc = xtq_coll_iallreduce(t, in[k], out[k], count, XTQ_DT_INT32, XTQ_OP_SUM, &req[k]);
        if (rc == -XTQ_EPROTO)
            req[k] = NULL;
        else
            CHECK_OK(rc);
    }
    int failed = 0;
    for (int k = N - 1; k >= 0; k--) {
        int rc = req[k] ? xtq_coll_wait(req[k], 60ll * 1000000000) : -XTQ_EPROTO;
        /* The mismatched call fails everywhere; one behind it may still
         * complete where it was under way before the failure was known
         * (then with the right answer), or fail: never time out. */
        if (rc == 0 && k > 0) {
            for (int i = 0; i < 64; i++)
                CHECK_EQ(out[k][i], 0);
            continue;
        }
        if (rc != -XTQ_EPROTO)
            XTQ_FAIL("rank %d: call %d (%s) returned %d (%s), expected -XTQ_EPROTO", rank, k,
                     k ? "behind the mismatched one" : "mismatched", rc, xtq_errname(rc));
        failed++;
    }
    /* The team stays broken. */
    int32_t x = 1, y;
    CHECK_ERR(xtq_coll_allreduce(t, &x, &y, 1, XTQ_DT_INT32, XTQ_OP_SUM), -XTQ_EPROTO);
    printf("rank %d: %d of %d calls from the mismatched one on failed, none hung\n", rank,
           failed, N);
    xtq_coll_team_destroy(t);
    teardown();
}

/* The team id coll.c puts in every header (FNV-1a over the members'
 * ranks, seeded with the index): a forged message must carry it. */
static uint32_t team_id(int n, uint32_t index)
{
    uint32_t h = 2166136261u ^ index;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)i;
        h *= 16777619u;
    }
    return h;
}

/* A peer whose header claims more elements than its payload holds: the
 * receiver compares the header with the length the engine delivered
 * (xtq_task_payload) before anything else reads the piece, and the call
 * fails with -XTQ_EBADMSG on every rank (without that check the header
 * goes on to the signature and schedule checks, which decide by the
 * header alone, and the error is another one). 2 ranks, recursive
 * doubling. */
XTQ_TEST(short_piece)
{
    const uint32_t n = 64;
    float in[64], out[64];

    setup();
    const uint32_t index = xtq_table_size(ctx) - 1;
    if (size != 2)
        XTQ_SKIP("needs exactly 2 ranks (its forged message is rank 1's first step)");
    xtq_coll_team_t *t;
    xtq_coll_team_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = XTQ_COLL_TEAM_ATTR_FIELD_ALG | XTQ_COLL_TEAM_ATTR_FIELD_INDEX;
    a.alg = XTQ_COLL_ALG_RD;
    a.index = index;
    CHECK_OK(xtq_coll_team_create(ctx, &a, &t));
    for (uint32_t i = 0; i < n; i++)
        in[i] = (float)(rank + 1);
    if (rank == 0) {
        struct coll_kargs k;
        uint8_t cmd[XTQ_AQL_PACKET_SIZE + sizeof(k)];
        size_t len;
        xtq_completion_t comp;

        memset(&k, 0, sizeof(k));
        k.extent = 1; /* slot 0: byte offset 0 of the slot table */
        k.h.magic = COLL_MAGIC;
        k.h.kind = COLL_MSG_DATA;
        k.h.type = XTQ_DT_FLOAT;
        k.h.op = XTQ_OP_SUM;
        k.h.alg = XTQ_COLL_ALG_RD;
        k.h.team = team_id(size, index);
        k.h.ckind = XTQ_COLL_ALLREDUCE;
        k.h.count = n;
        k.h.piece = n;
        k.h.cnt = n;
        CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), index, index, NULL, &k, sizeof(k), &len));
        memset(&comp, 0, sizeof(comp));
        /* One element short of what the header claims. */
        CHECK_OK(xtq_put(ctx, 1, cmd, len, in, (n - 1) * sizeof(float), XTQ_PUT_REMOTE_COMPLETION,
                         &comp));
        /* Its task fails it (-XTQ_EBADMSG at this end too). */
        int prc = xtq_completion_wait(ctx, &comp, XTQ_TIMEOUT_INFINITE);
        printf("rank 0: forged piece: %s\n", xtq_strerror(prc ? prc : comp.status));
    }
    int rc = xtq_coll_allreduce(t, in, out, n, XTQ_DT_FLOAT, XTQ_OP_SUM);
    printf("rank %d: allreduce after a short piece: %s\n", rank, xtq_strerror(rc));
    /* The rank that received the forged piece must refuse the
     * instance. The forger may finish first with rank 1's real data
     * (rank 1 sends its half before it looks at what arrived): then its
     * result must be exact; otherwise it fails the same way. */
    if (rank == 1 && rc != -XTQ_EBADMSG)
        XTQ_FAIL("rank %d: returned %d (%s), expected -XTQ_EBADMSG", rank, rc, xtq_errname(rc));
    if (rank == 0 && rc == 0) {
        for (uint32_t i = 0; i < n; i++)
            if (out[i] != 3.0f)
                XTQ_FAIL("rank 0: element %u is %g after a completed allreduce, expected 3", i,
                         (double)out[i]);
    } else if (rank == 0 && rc != -XTQ_EBADMSG) {
        XTQ_FAIL("rank 0: returned %d (%s), expected 0 or -XTQ_EBADMSG", rc, xtq_errname(rc));
    }
    xtq_coll_team_destroy(t);
    teardown();
}

/*
 * A call completes once its receives ran and its sends are LOCAL; the
 * acknowledgements are reaped later (XTQ_COLL_ACK_LATER). Rank 1 runs a
 * manual-progress engine and, after its post, does not progress until rank
 * 0 says (through a file) that its call completed: rank 0 then has rank 1's
 * piece but no acknowledgement of its own. Waiting for that ack (the old
 * way, or XTQ_COLL_ACK_LATER=0) times rank 0 out here. Both results are
 * checked, and the team is used again afterwards (the reaped completions).
 */
XTQ_TEST(ack_later)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    xtq_init_attr_t ia;
    float in[8], out[8];
    char path[128];

    if (!r)
        r = getenv("PMIX_RANK");
    memset(&ia, 0, sizeof(ia));
    if (r && atoi(r) == 1) {
        ia.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS;
        ia.progress = XTQ_PROGRESS_MANUAL;
    }
    CHECK_OK(xtq_init(&ia, &ctx));
    rank = xtq_rank(ctx);
    size = xtq_size(ctx);
    if (size != 2 || !r || atoi(r) != rank)
        XTQ_SKIP("needs 2 ranks started by mpirun (its rank from OMPI_COMM_WORLD_RANK or "
                 "PMIX_RANK)");
    /* Both ranks are children of the same launcher process. */
    char made[160];
    snprintf(path, sizeof(path), "/tmp/xtq_test_ack_later.%d", (int)getppid());
    snprintf(made, sizeof(made), "%s.made", path);
    if (rank == 0) {
        unlink(path);
        unlink(made);
    }
    xtq_coll_team_t *t = team_with(XTQ_COLL_ALG_RD);
    /* Rank 1 progresses until rank 0 has its team too (rank 0's last
     * creation message waits for rank 1's acknowledgement). */
    if (rank == 0) {
        FILE *f = fopen(made, "w");
        CHECK(f != NULL);
        fclose(f);
    } else {
        int seen = 0;
        for (int k = 0; k < 300000 && !seen; k++) {
            seen = access(made, F_OK) == 0;
            if (!seen) {
                xtq_progress(ctx);
                usleep(100);
            }
        }
        CHECK(seen);
    }
    for (int i = 0; i < 8; i++)
        in[i] = (float)(rank + 1);
    xtq_coll_req_t *req;
    CHECK_OK(xtq_coll_iallreduce(t, in, out, 8, XTQ_DT_FLOAT, XTQ_OP_SUM, &req));
    if (rank == 0) {
        int rc = xtq_coll_wait(req, 10ll * 1000000000);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL);
        fprintf(f, "%d\n", rc);
        fclose(f);
        if (rc == -XTQ_ETIMEDOUT) {
            CHECK_OK(xtq_coll_wait(req, XTQ_TIMEOUT_INFINITE));
            XTQ_FAIL("rank 0: the allreduce waited for rank 1 to acknowledge its piece");
        }
        CHECK_OK(rc);
    } else {
        /* No progress here: rank 0's piece stays unacknowledged. */
        int seen = 0;
        for (int k = 0; k < 30000 && !seen; k++) {
            seen = access(path, F_OK) == 0;
            if (!seen)
                usleep(1000);
        }
        CHECK(seen);
        CHECK_OK(xtq_coll_wait(req, XTQ_TIMEOUT_INFINITE));
    }
    for (int i = 0; i < 8; i++)
        if (out[i] != 3.0f)
            XTQ_FAIL("rank %d: element %d is %g, expected 3", rank, i, (double)out[i]);
    /* Later calls on the same team, their acks reaped by the calls after. */
    for (int k = 0; k < 50; k++) {
        for (int i = 0; i < 8; i++)
            in[i] = (float)(rank + k);
        CHECK_OK(xtq_coll_allreduce(t, in, out, 8, XTQ_DT_FLOAT, XTQ_OP_SUM));
        for (int i = 0; i < 8; i++)
            if (out[i] != (float)(2 * k + 1))
                XTQ_FAIL("rank %d, call %d: element %d is %g", rank, k, i, (double)out[i]);
    }
    CHECK_OK(xtq_coll_team_destroy(t));
    if (rank == 0) {
        unlink(path);
        unlink(made);
    }
    teardown();
}

/*
 * Same-host single copy (XTQ_COLL_CMA): on the shm provider every peer
 * reads this rank's large pieces from its memory (the team's probe
 * passed); on tcp none does. Every algorithm, in place and not, vectors
 * whose pieces are above XTQ_COLL_CMA_MIN and above the 64 KiB a
 * reduction reads at a time, a reduce; then the same on a team made with
 * XTQ_COLL_CMA=off, which must read nothing.
 */
static void cma_round(xtq_coll_team_t *t)
{
    static const uint64_t counts[] = {3000, 70001};
    for (unsigned k = 0; k < 2; k++)
        for (int inplace = 0; inplace <= 1; inplace++) {
            one(t, XTQ_COLL_ALLREDUCE, counts[k], XTQ_DT_DOUBLE, XTQ_OP_SUM, inplace, 0);
            one(t, XTQ_COLL_ALLREDUCE, counts[k], XTQ_DT_INT32, XTQ_OP_MAX, inplace, 0);
        }
    one(t, XTQ_COLL_REDUCE, 70001, XTQ_DT_FLOAT, XTQ_OP_SUM, 0, size - 1);
}

XTQ_TEST(cma)
{
    setup();
    const char *prov = xtq_provider_name(ctx);
    int want = prov && strcmp(prov, "shm") == 0 ? size - 1 : 0;
    for (int a = 1; a < XTQ_COLL_ALG_COUNT; a++) {
        xtq_coll_team_t *t = team_with((enum xtq_coll_alg)a);
        int got = xtq_coll_team_cma_peers(t);
        printf("rank %d: %s, provider %s: %d of %d peers read this rank's pieces\n", rank,
               xtq_coll_alg_name(a), prov, got, size - 1);
        if (got != want)
            XTQ_FAIL("rank %d: %d peers read by CMA on provider %s, expected %d", rank, got, prov,
                     want);
        cma_round(t);
        xtq_coll_team_destroy(t);
    }
    setenv("XTQ_COLL_CMA", "off", 1);
    xtq_coll_team_t *t = team_with(XTQ_COLL_ALG_AUTO);
    if (xtq_coll_team_cma_peers(t) != 0)
        XTQ_FAIL("rank %d: XTQ_COLL_CMA=off, yet %d peers read by CMA", rank,
                 xtq_coll_team_cma_peers(t));
    cma_round(t);
    xtq_coll_team_destroy(t);
    unsetenv("XTQ_COLL_CMA");
    teardown();
}

/* A forged piece "in rank 0's memory" (2 ranks, shm, recursive doubling):
 * argv "address": at an address rank 0 has not mapped: rank 1's read
 * fails and the call fails with -XTQ_ERANGE there, no crash; "pid": in
 * another process than the one rank 0's probe named: refused unread,
 * -XTQ_EBADMSG. Rank 0 (the forger) completes exactly or fails the same
 * way, as in short_piece. */
XTQ_TEST(cma_forged)
{
    const char *how = xtq_test_argc > 0 ? xtq_test_argv[0] : "address";
    const uint32_t n = 4096;
    static float in[4096], out[4096];
    int want = strcmp(how, "pid") == 0 ? -XTQ_EBADMSG : -XTQ_ERANGE;

    setup();
    const uint32_t index = xtq_table_size(ctx) - 1;
    if (size != 2)
        XTQ_SKIP("needs exactly 2 ranks (its forged message is rank 0's first step)");
    setenv("XTQ_COLL_PIECE", "16384", 1); /* the header's piece: n floats */
    xtq_coll_team_t *t;
    xtq_coll_team_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = XTQ_COLL_TEAM_ATTR_FIELD_ALG | XTQ_COLL_TEAM_ATTR_FIELD_INDEX;
    a.alg = XTQ_COLL_ALG_RD;
    a.index = index;
    CHECK_OK(xtq_coll_team_create(ctx, &a, &t));
    if (xtq_coll_team_cma_peers(t) != 1) {
        xtq_coll_team_destroy(t);
        XTQ_SKIP("no same-host single copy here (provider %s)", xtq_provider_name(ctx));
    }
    for (uint32_t i = 0; i < n; i++)
        in[i] = (float)(rank + 1);
    if (rank == 0) {
        struct coll_kargs k;
        uint8_t cmd[XTQ_AQL_PACKET_SIZE + sizeof(k)];
        size_t len;
        xtq_completion_t comp;

        memset(&k, 0, sizeof(k));
        k.extent = 1;
        k.h.magic = COLL_MAGIC;
        k.h.kind = COLL_MSG_DATA_CMA;
        k.h.type = XTQ_DT_FLOAT;
        k.h.op = XTQ_OP_SUM;
        k.h.alg = XTQ_COLL_ALG_RD;
        k.h.team = team_id(size, index);
        k.h.ckind = XTQ_COLL_ALLREDUCE;
        k.h.count = n;
        k.h.piece = n;
        k.h.cnt = n;
        k.h.src_pid = strcmp(how, "pid") == 0 ? 1 : (int32_t)getpid();
        k.h.src_addr = strcmp(how, "pid") == 0 ? (uint64_t)(uintptr_t)in : 4096; /* unmapped */
        CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), index, index, NULL, &k, sizeof(k), &len));
        memset(&comp, 0, sizeof(comp));
        CHECK_OK(xtq_put(ctx, 1, cmd, len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &comp));
        int prc = xtq_completion_wait(ctx, &comp, XTQ_TIMEOUT_INFINITE);
        printf("rank 0: forged piece (%s): %s\n", how, xtq_strerror(prc ? prc : comp.status));
    }
    int rc = xtq_coll_allreduce(t, in, out, n, XTQ_DT_FLOAT, XTQ_OP_SUM);
    printf("rank %d: allreduce after a forged piece (%s): %s\n", rank, how, xtq_strerror(rc));
    if (rank == 1 && rc != want)
        XTQ_FAIL("rank 1: returned %d (%s), expected %s", rc, xtq_errname(rc), xtq_errname(want));
    if (rank == 0 && rc == 0) {
        for (uint32_t i = 0; i < n; i++)
            if (out[i] != 3.0f)
                XTQ_FAIL("rank 0: element %u is %g after a completed allreduce, expected 3", i,
                         (double)out[i]);
    } else if (rank == 0 && rc != want) {
        XTQ_FAIL("rank 0: returned %d (%s), expected 0 or %s", rc, xtq_errname(rc),
                 xtq_errname(want));
    }
    xtq_coll_team_destroy(t);
    teardown();
}

/* The GPU tests' start: the context and the host team, every rank with a
 * GPU (agreed over the host team), or SKIP. */
static void gpu_setup_or_skip(void)
{
    char why[256];
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int gpu = ar_gpu_open(lr ? atoi(lr) : 0, why, sizeof(why)) == 0;
    setup();
    /* Every rank must agree before the collective team creation. */
    CHECK_OK(xtq_coll_team_create(ctx, NULL, &host_team));
    int64_t g = gpu, gall = 0;
    CHECK_OK(xtq_coll_allreduce(host_team, &g, &gall, 1, XTQ_DT_INT64, XTQ_OP_MIN));
    if (!gall) {
        CHECK_OK(xtq_coll_team_destroy(host_team));
        teardown();
        XTQ_SKIP("%s", gpu ? "a rank has no GPU" : why);
    }
}

/* A CUDA team with algorithm `alg`, or SKIP where there is none. */
static xtq_coll_team_t *cuda_team_or_skip(enum xtq_coll_alg alg)
{
    xtq_coll_team_attr_t at;
    xtq_coll_team_t *t = NULL;
    memset(&at, 0, sizeof(at));
    at.field_mask = XTQ_COLL_TEAM_ATTR_FIELD_MEM | XTQ_COLL_TEAM_ATTR_FIELD_ALG;
    at.mem = XTQ_COLL_MEM_CUDA;
    at.alg = alg;
    int rc = xtq_coll_team_create(ctx, &at, &t);
    if (rc == -XTQ_ENOAGENT || rc == -XTQ_ENOSYS) {
        CHECK_OK(xtq_coll_team_destroy(host_team));
        teardown();
        XTQ_SKIP("no CUDA team: %s", xtq_strerror(rc));
    }
    CHECK_OK(rc);
    return t;
}

/* A CUDA team: device buffers reduced by the CUDA agent, every algorithm,
 * in place and not, a reduce; skips where there is no GPU. */
XTQ_TEST(gpu_team)
{
    gpu_setup_or_skip();
    for (unsigned a = 0; a < 3; a++) {
        xtq_coll_team_t *t = cuda_team_or_skip(algs[a]);
        /* Peer reads as XTQ_COLL_GPU_PEER asks (auto: where peers map). */
        const char *pm = getenv("XTQ_COLL_GPU_PEER");
        int peer = xtq_coll_team_gpu_peer(t);
        if (pm && strcmp(pm, "on") == 0 && peer != 1)
            XTQ_FAIL("rank %d: XTQ_COLL_GPU_PEER=on, but the team sends through host memory", rank);
        if (pm && strcmp(pm, "off") == 0 && peer != 0)
            XTQ_FAIL("rank %d: XTQ_COLL_GPU_PEER=off, but the team uses peer reads", rank);
        if (rank == 0 && a == 0)
            printf("CUDA team: %s\n", peer == 1 ? "peer reads" : "pinned host mirrors");
        uint64_t counts[] = {1, 1000, 300000};
        for (unsigned k = 0; k < 3; k++)
            for (int inplace = 0; inplace <= 1; inplace++) {
                uint64_t count = counts[k];
                size_t bytes = count * 4;
                float *h = malloc(bytes), *dout = ar_gpu_malloc(bytes), *din = ar_gpu_malloc(bytes);
                fill(h, XTQ_DT_FLOAT, XTQ_OP_SUM, rank, count);
                CHECK(ar_gpu_h2d(inplace ? dout : din, h, bytes) == 0);
                CHECK_OK(xtq_coll_allreduce(t, inplace ? XTQ_COLL_IN_PLACE : din, dout, count,
                                            XTQ_DT_FLOAT, XTQ_OP_SUM));
                CHECK(ar_gpu_d2h(h, dout, bytes) == 0);
                void *ref = reference(XTQ_DT_FLOAT, XTQ_OP_SUM, count, size);
                expect_equal(h, ref, XTQ_DT_FLOAT, count, "CUDA allreduce");
                free(ref);
                free(h);
                /* Device memory stays until the end (frees may wait for an
                 * idle device while the agent's processor runs). */
                /* Recursive doubling's first send reads the whole input:
                 * with peer reads a small call's goes with the call, its
                 * receiver waiting for the ready word (XTQ_COLL_GPU_READY);
                 * otherwise it leaves on its copy's completion where the
                 * team chains (XTQ_COLL_GPU_CHAIN). (The others may send
                 * nothing first at one element.) */
                int64_t chained = coll_team_chained_sends(t), readied = coll_team_ready_sends(t);
                const char *rv = getenv("XTQ_COLL_GPU_READY"); /* default auto */
                int ready_off = rv && (strcmp(rv, "off") == 0 || strcmp(rv, "0") == 0);
                if ((ready_off || peer != 1) && readied != -1)
                    XTQ_FAIL("rank %d: the team sends before its copies (ready word), but %s",
                             rank, ready_off ? "XTQ_COLL_GPU_READY=off" : "without peer reads");
                if (!ready_off && peer == 1 && chained >= 0 && readied < 0)
                    XTQ_FAIL("rank %d: peer reads and a chaining GPU, but no ready word", rank);
                if (algs[a] == XTQ_COLL_ALG_RD && k == 0 && readied == 0)
                    XTQ_FAIL("rank %d: a %llu-element call sent nothing before its copy", rank,
                             (unsigned long long)count);
                if (algs[a] == XTQ_COLL_ALG_RD && k == 0 && readied < 0 && chained == 0)
                    XTQ_FAIL("rank %d: a %llu-element call chained no send to its copy", rank,
                             (unsigned long long)count);
            }
        CHECK_OK(xtq_coll_team_destroy(t));
    }
    CHECK_OK(xtq_coll_team_destroy(host_team));
    teardown();
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Peer reads, a sender whose GPU never advances its ready word (a wedged
 * or dead peer after its message left): the receiver's GPU task gives up
 * after the team's timeout and its call fails instead of hanging (the
 * sender's own call may complete: what it read was ready); the team is
 * broken on both from then on. Skips without two GPUs that
 * map each other's memory. */
/* The ready-word tests' start: a recursive-doubling CUDA team that sends
 * with the ready word (or SKIP), its 16-float buffers (rank + 1 in din),
 * and one good call: the buffers are mapped, the word works. */
static xtq_coll_team_t *ready_team_after_one_call(float **din, float **dout)
{
    gpu_setup_or_skip();
    xtq_coll_team_t *t = cuda_team_or_skip(XTQ_COLL_ALG_RD);
    int64_t ok = coll_team_ready_sends(t) >= 0, all_ok = 0;
    CHECK_OK(xtq_coll_allreduce(host_team, &ok, &all_ok, 1, XTQ_DT_INT64, XTQ_OP_MIN));
    if (!all_ok) {
        CHECK_OK(xtq_coll_team_destroy(t));
        CHECK_OK(xtq_coll_team_destroy(host_team));
        teardown();
        XTQ_SKIP("the CUDA team does not send before its copies (no peer reads here)");
    }
    float h[16];
    *din = ar_gpu_malloc(sizeof(h));
    *dout = ar_gpu_malloc(sizeof(h));
    for (unsigned i = 0; i < 16; i++)
        h[i] = (float)(rank + 1);
    CHECK(ar_gpu_h2d(*din, h, sizeof(h)) == 0);
    CHECK_OK(xtq_coll_allreduce(t, *din, *dout, 16, XTQ_DT_FLOAT, XTQ_OP_SUM));
    CHECK(ar_gpu_d2h(h, *dout, sizeof(h)) == 0);
    CHECK(h[0] == (float)(size * (size + 1) / 2));
    return t;
}

XTQ_TEST(gpu_ready_lost)
{
    const uint64_t count = 16;
    float h[16], *din, *dout;
    xtq_coll_team_t *t = ready_team_after_one_call(&din, &dout);
    if (rank == 1)
        coll_team_drop_ready(t); /* its next call's word is never stored */
    int64_t t0 = now_us();
    int rc = xtq_coll_allreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM);
    printf("rank %d: allreduce without rank 1's ready word: %s after %.1f s\n", rank,
           xtq_strerror(rc), (double)(now_us() - t0) / 1e6);
    /* Rank 0 reads rank 1's piece: it must fail. Rank 1 read rank 0's,
     * whose word came: it may complete, then with the right sum. */
    if (rank == 0 && rc == 0)
        XTQ_FAIL("rank 0: the call completed without rank 1's ready word");
    if (rc == 0) {
        CHECK(ar_gpu_d2h(h, dout, sizeof(h)) == 0);
        CHECK(h[0] == (float)(size * (size + 1) / 2));
    }
    /* The team is broken on both from here (rank 0's abort reaches rank 1). */
    CHECK(xtq_coll_allreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM) != 0);
    xtq_coll_team_destroy(t);
    CHECK_OK(xtq_coll_team_destroy(host_team));
    teardown();
}

/* The same wedged peer with no timeout at all (XTQ_COLL_TIMEOUT_MS=0):
 * rank 0's GPU task would wait for rank 1's word for ever, holding its
 * processor. Rank 1 then fails the call (what a rank does when its post
 * fails, or when it finds a peer gone): rank 0's wait ends at once
 * (-XTQ_ECANCELED on the GPU) and its call fails instead of hanging; the
 * test's timeout is the hang detector. */
XTQ_TEST(gpu_ready_abort)
{
    const uint64_t count = 16;
    float *din, *dout;
    xtq_coll_team_t *t = ready_team_after_one_call(&din, &dout);
    uint64_t inst = coll_team_next_instance(t);
    int64_t t0 = now_us();
    int rc;
    if (rank == 0) {
        rc = xtq_coll_allreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM);
    } else {
        xtq_coll_req_t *r = NULL;
        coll_team_drop_ready(t); /* this call's word is never stored */
        CHECK_OK(xtq_coll_iallreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM, &r));
        usleep(300000); /* rank 0's GPU task waits by now */
        coll_team_abort(t, inst, -XTQ_EPROTO);
        rc = xtq_coll_wait(r, XTQ_TIMEOUT_INFINITE);
    }
    printf("rank %d: allreduce without rank 1's ready word, failed by rank 1: %s after %.1f s\n",
           rank, xtq_strerror(rc), (double)(now_us() - t0) / 1e6);
    CHECK(rc != 0);
    CHECK(xtq_coll_allreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM) != 0);
    xtq_coll_team_destroy(t);
    CHECK_OK(xtq_coll_team_destroy(host_team));
    teardown();
}

/* Peer reads, a peer whose GPU buffer is smaller than its handle says (a
 * bug, mismatched counts, a forged handle): rank 0's handles claim 64 MiB
 * more than its buffers hold (coll_team_gpu_claim_extra, a test hook).
 * Rank 1 must refuse the mapping with -XTQ_ERANGE (its GPU would read
 * pieces up to the claimed size, past the allocation), so rank 0's call
 * fails at its post and rank 1's with rank 0's abort; nothing crashes,
 * and the team is broken on both. The case also matches the message
 * that names the rank and both sizes. Skips without two GPUs that map
 * each other's memory. */
XTQ_TEST(gpu_ipc_short)
{
    const uint64_t count = 16;
    float h[16];
    gpu_setup_or_skip();
    xtq_coll_team_t *t = cuda_team_or_skip(XTQ_COLL_ALG_RD);
    int64_t peer = xtq_coll_team_gpu_peer(t) == 1, all_peer = 0;
    CHECK_OK(xtq_coll_allreduce(host_team, &peer, &all_peer, 1, XTQ_DT_INT64, XTQ_OP_MIN));
    if (!all_peer) {
        CHECK_OK(xtq_coll_team_destroy(t));
        CHECK_OK(xtq_coll_team_destroy(host_team));
        teardown();
        XTQ_SKIP("the CUDA team sends through host memory (no peer reads here)");
    }
    float *din = ar_gpu_malloc(sizeof(h)), *dout = ar_gpu_malloc(sizeof(h));
    for (unsigned i = 0; i < 16; i++)
        h[i] = (float)(rank + 1);
    CHECK(ar_gpu_h2d(din, h, sizeof(h)) == 0);
    if (rank == 0)
        coll_team_gpu_claim_extra(t, 64u << 20);
    /* The team's first call maps every slot's buffer it uses. */
    int rc = xtq_coll_allreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM);
    printf("rank %d: allreduce with rank 0's GPU buffer claimed 64 MiB larger: %s\n", rank,
           xtq_strerror(rc));
    if (rank == 0)
        CHECK_EQ(rc, -XTQ_ERANGE);
    else
        CHECK(rc != 0);
    CHECK(xtq_coll_allreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM) != 0);
    xtq_coll_team_destroy(t);
    CHECK_OK(xtq_coll_team_destroy(host_team));
    teardown();
}

/* A failed team's GPU waits are over for good (coll_gpu_cancel_waits): a
 * wait whose word already holds its value succeeds before the team fails,
 * and fails with -XTQ_ECANCELED after it, at once (the GPU would find the
 * word ready and never look at the cancel word); the team's calls fail
 * too. Skips without a GPU. */
XTQ_TEST(gpu_wait_after_cancel)
{
    const uint64_t count = 16, one = 1;
    float h[16];
    gpu_setup_or_skip();
    xtq_coll_team_t *t = cuda_team_or_skip(XTQ_COLL_ALG_AUTO);
    float *din = ar_gpu_malloc(sizeof(h)), *dout = ar_gpu_malloc(sizeof(h));
    uint64_t *word = ar_gpu_malloc(sizeof(one));
    for (unsigned i = 0; i < 16; i++)
        h[i] = (float)(rank + 1);
    CHECK(ar_gpu_h2d(din, h, sizeof(h)) == 0);
    CHECK(ar_gpu_h2d(word, &one, sizeof(one)) == 0);
    CHECK_OK(xtq_coll_allreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM));
    CHECK_OK(coll_team_gpu_wait(t, word, 1));
    /* Every rank fails the next call (each tells the others too). */
    coll_team_abort(t, coll_team_next_instance(t), -XTQ_EPROTO);
    CHECK_ERR(coll_team_gpu_wait(t, word, 1), -XTQ_ECANCELED);
    CHECK(xtq_coll_allreduce(t, din, dout, count, XTQ_DT_FLOAT, XTQ_OP_SUM) != 0);
    CHECK_ERR(coll_team_gpu_wait(t, word, 1), -XTQ_ECANCELED);
    xtq_coll_team_destroy(t);
    CHECK_OK(xtq_coll_team_destroy(host_team));
    teardown();
}
